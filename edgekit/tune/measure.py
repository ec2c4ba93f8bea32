"""Where `edgekit tune` times its candidates: the runtime the bundle will run in.

A ranking made with one runtime does not carry over to another (issue 22: the text encoder's
best set by iree-benchmark-module was 1.06× onnxruntime in process, while another set reached
0.95×; on the KWS MLP the per-call overhead decides, and the tool's process differs there).
So a bundle used in this process (edgekit.compile, the Python API, `validate --local`) is
tuned in this process, through the same lean call path, and a bundle for a device is tuned
with the device's own tools (`--host`).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

import numpy as np

from edgekit.config.profiles import Target, host_arch
from edgekit.errors import ConfigError
from edgekit.models.bundle import Bundle
from edgekit.toolchain.iree import driver_for_threads
from edgekit.toolchain.iree_runtime import InProcessModule

RUNTIMES = ("auto", "in-process", "tools")


def runs_here(target: Target) -> bool:
    """This machine can run the target's modules (so tuning may measure here)."""
    return target.backend == "llvm-cpu" and target.arch == host_arch()


def measuring_runtime(choice: str, target: Target, host: str | None) -> str:
    """`in-process` or `tools` for a tune run: `choice` (the option, else the profile's
    `tune.runtime`), with `auto` meaning what the bundle runs in — the device's tools when
    tuning on a device, this process for a target this machine runs."""
    if choice not in RUNTIMES:
        raise ConfigError(f"unknown measuring runtime {choice!r}", key="runtime",
                          hint=f"expected one of: {', '.join(RUNTIMES)}")
    if choice == "auto":
        return "tools" if host is not None or not runs_here(target) else "in-process"
    if choice == "in-process" and host is not None:
        raise ConfigError("a device's candidates cannot be timed in this process",
                          key="runtime", hint="drop --host, or use --runtime tools (the "
                                              "device's iree-benchmark-module)")
    if choice == "in-process" and not runs_here(target):
        raise ConfigError(f"this machine cannot run {target.name} modules in process",
                          key="runtime", hint="pass --host DEVICE (its tools measure)")
    return choice


class InProcessBench:
    """Per-call ms of candidates in this process: each (module, thread count) loaded once on
    the driver a bundle tuned for that count ships (local-sync for one thread, local-task with
    that many workers otherwise), called as InProcessRunner calls it — numpy inputs copied in,
    outputs copied out. Use as a context manager: the runtime objects go at its end."""

    WARMUP = 3

    def __init__(self) -> None:
        self._loaded: dict[tuple[Path, int], tuple[InProcessModule, list[np.ndarray]]] = {}

    def __enter__(self) -> "InProcessBench":
        return self

    def __exit__(self, *_) -> None:
        for module, _ in self._loaded.values():
            module.close()
        self._loaded.clear()

    def _module(self, bundle: Bundle, threads: int):
        key = (bundle.module, threads)
        if key not in self._loaded:
            m = bundle.manifest
            driver = driver_for_threads(m.runtime_driver, threads)
            module = InProcessModule(bundle.module, driver, m.entry_function,
                                     threads if driver == "local-task" else None)
            inputs = [np.load(bundle.file(p), allow_pickle=False) for p in m.golden_inputs]
            for _ in range(self.WARMUP):
                module(inputs)
            self._loaded[key] = (module, inputs)
        return self._loaded[key]

    def __call__(self, bundle: Bundle, threads: int, calls: int) -> list[float]:
        """One round: `calls` timed calls after one untimed call (the candidates measured
        before this one have evicted its weights from the caches, as iree-benchmark-module's
        fresh process starts cold). The garbage collector waits for the round's end."""
        module, inputs = self._module(bundle, threads)
        module(inputs)
        samples = []
        enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(calls):
                started = time.perf_counter()
                module(inputs)
                samples.append((time.perf_counter() - started) * 1e3)
        finally:
            if enabled:
                gc.enable()
        return samples


__all__ = ["measuring_runtime", "runs_here", "InProcessBench", "RUNTIMES"]
