#!/usr/bin/env python3
"""Per-call overhead on a model that does almost nothing (one add on two 1×16 tensors):
edgekit vs onnxruntime vs PyTorch eager, in one process, interleaved round by round so that
machine noise hits all alike. Prints median and p90 per call (µs) and ratios to onnxruntime's
median measured in the same run.

    python bench/call_overhead.py                     # 20 rounds × 500 calls
    python bench/call_overhead.py --rounds 10 --calls 200 --json out.json

Rows:
- `edgekit.compile`: `torch.compile(model, backend="edgekit")` called with torch tensors (dynamo
  guards + the generated wrapper + the in-process IREE call);
- `edgekit runner (lean)`: the in-process runner that `edgekit.compile` and the ONNX backend use,
  numpy in and out (compile/runners.py `LeanCall`);
- `edgekit runner (invoker)`: the same runner through IREE's general `FunctionInvoker`
  (the call path before the lean one), for before/after in the same run;
- `edgekit lean call, local-sync`: the same module and lean call on the `local-sync` driver
  (the runner uses the profile's driver, `local-task` for host: its task system dominates a
  call this small);
- onnxruntime (1 thread, sequential) and PyTorch eager (`torch.no_grad`);
- `torch.compile eager backend`: dynamo's own per-call cost (guards, frame), which
  `edgekit.compile` pays too.
Everything runs single-threaded (IREE `local-sync`, ORT intra/inter-op 1, torch 1 thread).
"""

from __future__ import annotations

import argparse
import atexit
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.compile import runners  # noqa: E402


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _ort_session(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor):
    buf = io.BytesIO()
    torch.onnx.export(model, (x, y), buf, input_names=["x", "y"], output_names=["z"],
                      dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if "EDGEKIT_CACHE_DIR" not in os.environ:
        # a cache of its own, gone at exit (it was left in /tmp, one per run)
        scratch = tempfile.mkdtemp(prefix="edgekit-bench-cache-")
        atexit.register(shutil.rmtree, scratch, True)
        os.environ["EDGEKIT_CACHE_DIR"] = scratch

    model = Add().eval()
    x, y = torch.rand(1, 16), torch.rand(1, 16)
    xn, yn = x.numpy(), y.numpy()
    expected = (x + y).numpy()

    compiled = torch.compile(model, backend="edgekit")
    with torch.no_grad():
        got = compiled(x, y)
    assert np.allclose(got.numpy(), expected)
    runner = runners._IN_PROCESS[-1]          # the graph's in-process runner, just created
    module = runner._module                   # its InProcessModule (toolchain/iree_runtime.py)
    lean = module._call
    assert lean is not None, "the add graph's ABI should take the lean path"
    # the same module on `local-sync` (no task system): what a 1-thread in-process call costs
    import iree.runtime as rt
    config = rt.Config("local-sync")
    context = rt.SystemContext(config=config)
    bundle = runner.bundle
    context.add_vm_module(rt.VmModule.mmap(config.vm_instance, str(bundle.module)))
    sync_call = runners.LeanCall.bind(rt, context, config.device,
                                      context.modules.module[bundle.manifest.entry_function])
    session = _ort_session(model, x, y)
    feeds = {"x": xn, "y": yn}

    def invoker_run():
        module._call = None
        try:
            return runner.run([xn, yn])
        finally:
            module._call = lean

    def eager():
        with torch.no_grad():
            return model(x, y)

    def via_compile():
        with torch.no_grad():
            return compiled(x, y)

    dynamo_only = torch.compile(model, backend="eager")

    def via_dynamo():
        with torch.no_grad():
            return dynamo_only(x, y)

    cases = {
        "onnxruntime": lambda: session.run(None, feeds),
        "torch eager": eager,
        "edgekit.compile": via_compile,
        "torch.compile eager backend": via_dynamo,
        "edgekit runner (lean)": lambda: runner.run([xn, yn]),
        "edgekit runner (invoker)": invoker_run,
        "edgekit lean call, local-sync": lambda: sync_call([xn, yn]),
    }
    for name, fn in cases.items():       # same answer everywhere, and warm
        out = fn()
        first = out[0] if isinstance(out, (list, tuple)) else out
        first = first.numpy() if isinstance(first, torch.Tensor) else first
        assert np.allclose(first, expected), name
        for _ in range(200):
            fn()

    times: dict[str, list[float]] = {name: [] for name in cases}
    clock = time.perf_counter
    for r in range(args.rounds):
        order = list(cases) if r % 2 == 0 else list(reversed(cases))
        for name in order:
            fn, samples = cases[name], times[name]
            for _ in range(args.calls):
                t = clock()
                fn()
                samples.append(clock() - t)

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    ort_p50 = statistics.median(times["onnxruntime"])
    rows = []
    print(f"one add on 1x16, {args.rounds} rounds x {args.calls} calls, load "
          f"{os.getloadavg()[0]:.2f} (1 min)")
    print(f"edgekit runner driver: {bundle.manifest.runtime_driver}")
    print(f"{'runner':30s} {'p50 µs':>8s} {'p90 µs':>8s} {'p50 / ort':>10s}")
    for name, samples in times.items():
        p50, p90 = statistics.median(samples), pct(samples, 0.9)
        rows.append({"runner": name, "p50_us": round(p50 * 1e6, 2),
                     "p90_us": round(p90 * 1e6, 2), "ratio_to_ort": round(p50 / ort_p50, 2)})
        print(f"{name:30s} {p50 * 1e6:8.1f} {p90 * 1e6:8.1f} {p50 / ort_p50:9.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "load": os.getloadavg()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
