"""One run of a bundle's module under IREE's HAL profiler: the benchmark's own record and the
per-dispatch groups `iree-profile dispatch` reads from the trace (`edgekit tune --dispatches`
ranks dispatches by them; bench/dispatch_profile.py reports them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from edgekit.models.bundle import Bundle
from edgekit.toolchain import iree


def profiled_run(bundle: Bundle, iterations: int, work: Path, threads: int = 1,
                 timeout: float = 1800) -> tuple[dict, list[dict]]:
    """(iree-benchmark-module's benchmark record, the trace's host dispatch groups) of
    `iterations` calls on the golden inputs with `threads` workers, in the runtime
    configuration a bundle tuned for that count runs in (1: local-sync)."""
    m = bundle.manifest
    trace = work / "run.ireeprof"
    driver, workers = iree.runtime_config(m.runtime_driver, threads)
    out = subprocess.run(
        [iree.tool_path("iree-benchmark-module"), f"--module={bundle.module}",
         *iree.runtime_flags(driver, workers), f"--function={m.entry_function}",
         *[f"--input=@{bundle.file(p)}" for p in m.golden_inputs],
         f"--benchmark_min_time={iterations}x", "--benchmark_format=json",
         *profiling_flags(str(trace))],
        check=True, capture_output=True, text=True, timeout=timeout).stdout
    run = json.loads(out)["benchmarks"][0]
    return run, dispatch_groups(trace, timeout)


def profiling_flags(trace: str) -> tuple[str, ...]:
    """iree-benchmark-module's HAL profiling into `trace` (the device's tool has them too)."""
    return ("--device_profiling_mode=host-execution,executable-metadata",
            f"--device_profiling_output={trace}")


def dispatch_groups(trace: Path, timeout: float = 1800) -> list[dict]:
    """The host dispatch groups `iree-profile dispatch` reads from a trace (this machine's
    tool also reads a trace a device wrote)."""
    groups = subprocess.run([iree.tool_path("iree-profile"), "dispatch", "--format=jsonl",
                             str(trace)], check=True, capture_output=True, text=True,
                            timeout=timeout).stdout
    return [g for g in map(json.loads, groups.splitlines())
            if g.get("type") == "host_dispatch_group"]
