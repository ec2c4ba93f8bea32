#!/usr/bin/env python3
"""Host latency: the edgekit-built module vs onnxruntime vs PyTorch eager on the same inputs.

For each example recipe, builds the `host` bundle (cached), then times every runner at 1 and 2
threads, interleaved round by round in one process so that machine noise hits all alike, and
prints median per-call latency with ratios to onnxruntime at the same thread count (1.00x).

    python bench/host_latency.py                     # all example models
    python bench/host_latency.py --models kws_mlp --rounds 30 --json out.json

edgekit runs through the IREE Python runtime: `local-sync` for 1 thread (no task system: best for
small models, docs/explanation/toolchain-notes.md) and `local-task` with a 2-group topology
for 2 threads.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit import BuildOptions, build, load_recipe  # noqa: E402
from edgekit.pipeline.frontends.registry import frontend_for  # noqa: E402


def load_model(recipe):
    """The recipe's model as its frontend loads it (`.model`: the nn.Module)."""
    return frontend_for(recipe.model).load(recipe)

MODELS = {"kws_mlp": "kws_mlp.yaml", "text_encoder": "text_encoder.yaml",
          "mobilenet_v2": "mobilenet_v2.yaml"}
THREADS = (1, 2)


def iree_runner(vmfb: Path, inputs: list[np.ndarray], threads: int, device=None):
    """`device`: run on this HAL device instead of local-sync (1 thread) / local-task."""
    import iree.runtime as rt
    if device is not None:
        config = rt.Config(device=device)
    elif threads == 1:
        config = rt.Config("local-sync")
    else:
        rt.flags.parse_flags(f"--task_topology_group_count={threads}")
        config = rt.Config("local-task")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb.read_bytes()))
    main = ctx.modules.module["main"]
    device_inputs = [rt.asdevicearray(config.device, x) for x in inputs]

    def run():
        out = main(*device_inputs)
        (out[0] if isinstance(out, (list, tuple)) else out).to_host()
    return run


def ort_runner(model: torch.nn.Module, inputs: list[np.ndarray], threads: int):
    buffer = io.BytesIO()
    args = tuple(torch.from_numpy(x) for x in inputs)
    names = [f"in{i}" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buffer, dynamo=False, input_names=names, opset_version=17)
    return ort_model_runner(buffer.getvalue(), names, inputs, threads)


def ort_model_runner(model: bytes, names: list[str], inputs: list[np.ndarray], threads: int):
    """onnxruntime as users run it: default (full) graph optimizations, `threads` intra-op."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, inputs))
    return lambda: session.run(None, feed)


def torch_runner(model: torch.nn.Module, inputs: list[np.ndarray], threads: int):
    args = tuple(torch.from_numpy(x) for x in inputs)

    def run():
        torch.set_num_threads(threads)
        with torch.inference_mode():
            model(*args)
    return run


def time_interleaved(runners: dict[str, callable], rounds: int, budget_s: float,
                     per_call: bool = False, fastest: bool = False) -> dict:
    """Per runner: the median over rounds of each round's mean call time — or, `per_call`, of
    each round's median call (robust to the preemptions of a loaded machine, which made round
    means ~2x the per-call median for the KWS MLP here with a load of 3 on 2 cores) — or,
    `fastest`, of each round's fastest call (at least two calls a round)."""
    for run in runners.values():  # warm-up (first-call allocation, lazy init)
        for _ in range(3):
            run()
    # size a round so that each runner gets ~budget_s/rounds of calls in total
    one_call = {}
    for name, run in runners.items():
        t = time.perf_counter()
        run()
        one_call[name] = time.perf_counter() - t
    least = 2 if fastest else 1
    calls = {name: max(least, int(budget_s / rounds / len(runners) / max(pc, 1e-6)))
             for name, pc in one_call.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            run, n = runners[name], calls[name]
            if per_call or fastest:
                each = []
                for _ in range(n):
                    t = time.perf_counter()
                    run()
                    each.append(time.perf_counter() - t)
                samples[name].append(min(each) if fastest else statistics.median(each))
                continue
            t = time.perf_counter()
            for _ in range(n):
                run()
            samples[name].append((time.perf_counter() - t) / n)
    return {name: {"median_ms": statistics.median(v) * 1e3,
                   "spread_ms": (max(v) - min(v)) * 1e3, "calls_per_round": calls[name]}
            for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=12.0, help="time budget per model")
    parser.add_argument("--json", type=Path, help="also write results here")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    results = []
    for key in opts.models.split(","):
        recipe_path = ROOT / "recipes" / MODELS[key]
        built = build(BuildOptions(recipe=recipe_path, target="host",
                                   out=Path("/tmp/edgekit-bench") / key))
        bundle = built.bundle
        inputs = [np.load(bundle.file(p)) for p in bundle.manifest.golden_inputs]
        model = load_model(load_recipe(recipe_path)).model
        runners = {}
        for n in THREADS:
            runners[f"edgekit/{n}"] = iree_runner(bundle.module, inputs, n)
            runners[f"onnxruntime/{n}"] = ort_runner(model, inputs, n)
            runners[f"torch/{n}"] = torch_runner(model, inputs, n)
        timing = time_interleaved(runners, opts.rounds, opts.seconds)
        for n in THREADS:
            base = timing[f"onnxruntime/{n}"]["median_ms"]
            row = {"model": key, "threads": n, "lowering": bundle.manifest.lowering.used,
                   "cached_build": built.cached}
            for runner in ("edgekit", "onnxruntime", "torch"):
                ms = timing[f"{runner}/{n}"]["median_ms"]
                row[f"{runner}_ms"] = round(ms, 4)
                row[f"{runner}_x_ort"] = round(ms / base, 2)
            results.append(row)
    print(f"{'model':<14}{'thr':>4}{'edgekit ms':>12}{'ort ms':>10}{'torch ms':>10}"
          f"{'edgekit/ort':>13}{'torch/ort':>11}  lowering")
    for r in results:
        print(f"{r['model']:<14}{r['threads']:>4}{r['edgekit_ms']:>12.3f}{r['onnxruntime_ms']:>10.3f}"
              f"{r['torch_ms']:>10.3f}{r['edgekit_x_ort']:>12.2f}x{r['torch_x_ort']:>10.2f}x"
              f"  {r['lowering']}")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
