#!/usr/bin/env python3
"""Tuned latency: edgekit-tuned modules vs every single flag set vs onnxruntime vs PyTorch eager.

For each reference model (MobileNetV2-like and ResNet18-like CNNs at 224², a transformer encoder
over 128 tokens, the keyword-spotting MLP) this runs `edgekit tune` for `host` once per thread
budget (`--threads 1`, then `--threads 1,2`: each budget's searches refine its own choice; builds
are cached, so a second run mostly re-measures), then times, for each thread count (1 and 2) in a
process of its own, interleaved round by round so machine noise hits all alike:

  * IREE with no flags at all (linalg path, generic CPU: "IREE dflt", the baseline of the
    tuning issue's 21×),
  * the untuned build (the profile's default lowering and CPU, no extra flags),
  * each flag set of the profile with its best lowering for that thread count,
  * the tuned variant for that thread budget (a 2-thread budget may run 1 thread),
  * onnxruntime (= 1.00×) and PyTorch eager,

and prints ratios to onnxruntime. IREE modules run in process as a tuned bundle runs there
(edgekit's InProcessModule, the lean call path: numpy inputs copied in, outputs copied out):
local-sync for one thread, local-task with the given worker count otherwise — the runtime the
tuner measures them in (`edgekit tune --runtime`, default in-process here; `--tune-runtime
tools` tunes with iree-benchmark-module instead, for a before/after). (One process per thread
count: onnxruntime's spinning workers, torch's pool and a second IREE task system would
otherwise take the cores between calls — in one process IREE's 2-thread figures came out ~2×
slower than the tuner's.) "best single set" is the
one flag set that is best across all models (geometric mean): what a fixed profile would
give; tuned must be at least as good.

    python bench/tuned_latency.py                       # all four models (~15 min cold)
    python bench/tuned_latency.py --models kws_mlp --json out.json
    EDGEKIT_BENCH_DIR=/tmp/mine python bench/tuned_latency.py   # bundles there (default /tmp/edgekit-bench-tuned)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_latency import (load_model, ort_runner, time_interleaved,  # noqa: E402
                          torch_runner)

from edgekit import load_recipe  # noqa: E402
from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.pipeline.build import BuildOptions, Variant, build  # noqa: E402
from edgekit.tune.tuner import TuneOptions, tune  # noqa: E402

MODELS = {"mobilenet_v2": "mobilenet_v2.yaml", "resnet18": "resnet18.yaml",
          "text_encoder": "text_encoder.yaml", "kws_mlp": "kws_mlp.yaml"}
THREADS = (1, 2)


def task_runner(vmfb: Path, inputs: list[np.ndarray], threads: int):
    """The module as a bundle tuned for `threads` runs in this process (and as the tuner
    measures it in process): local-sync for one thread, else local-task with `threads`
    workers, one device per thread count shared by the runners (toolchain/iree_runtime.py)."""
    from edgekit.toolchain.iree import driver_for_threads
    from edgekit.toolchain.iree_runtime import InProcessModule
    driver = driver_for_threads("local-task", threads)
    module = InProcessModule(vmfb, driver, "main", threads if driver == "local-task" else None)
    _KEEP.append(module)
    return lambda: module(inputs)


_KEEP: list = []   # closed before the interpreter exits (nanobind reports leaks otherwise)


def best_by_set(record, threads: int) -> dict[str, object]:
    """flag set → its fastest valid candidate at `threads` (any lowering); the profile's sets
    only (a dispatch search's candidates are one model's own, not a set to compare across)."""
    sets = {"default", *load_target("host").tune.flag_sets}
    best: dict[str, object] = {}
    for c in record.candidates:
        if c.status == "ok" and c.threads == threads and c.flag_set in sets:
            if c.flag_set not in best or c.p50_ms < best[c.flag_set].p50_ms:
                best[c.flag_set] = c
    return best


# What iree-compile does with no flags at all (the "default flag set": the linalg path,
# generic CPU): the baseline behind the 21× in the project's facts.
IREE_DEFAULTS = Variant("linalg", "iree-defaults", ("--iree-llvmcpu-target-cpu=generic",))


WORK = Path(os.environ.get("EDGEKIT_BENCH_DIR", "/tmp/edgekit-bench-tuned"))


def module_of(recipe: Path, candidate, key: str) -> Path:
    variant = Variant(candidate.lowering, candidate.flag_set, tuple(candidate.flags))
    name = variant.name.replace("/", "_")
    if len(name) > 100:     # a searched variant's name: shortened, told apart by its flags
        name = name[:80] + "-" + hashlib.sha256(" ".join(variant.flags).encode()).hexdigest()[:12]
    out = WORK / key / name
    return build(BuildOptions(recipe=recipe, target="host", out=out, variant=variant)).bundle.module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--lowerings", default="tosa,linalg")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--per-call", action="store_true",
                        help="per round, the median call instead of the mean (a loaded "
                             "machine's preemptions inflate means)")
    parser.add_argument("--tune-runtime", default="in-process", choices=("in-process", "tools"),
                        help="where `edgekit tune` times the candidates (tools: "
                             "iree-benchmark-module, the behaviour before issue 22)")
    parser.add_argument("--seconds", type=float, default=40.0, help="timing budget per model")
    parser.add_argument("--dispatches", type=int, default=0,
                        help="also let the tuner search tile sizes of this many hot dispatches "
                             "(`edgekit tune --dispatches`)")
    parser.add_argument("--per-dispatch", type=int, default=4)
    parser.add_argument("--conv-choice", action="store_true",
                        help="also let the tuner choose direct or im2col per convolution "
                             "(`edgekit tune --conv-choice`)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    rows = []
    for key in opts.models.split(","):
        recipe = ROOT / "recipes" / MODELS[key]
        # one tuning per thread budget, as a user with that budget runs it (`edgekit tune
        # --threads 1` / `--threads 1,2`): the searches refine each budget's own choice
        records = {}
        for t in THREADS:
            print(f"tuning {key} for {t} thread(s)…", file=sys.stderr, flush=True)
            records[t] = tune(TuneOptions(
                recipe=recipe, target="host", threads=tuple(n for n in THREADS if n <= t),
                lowerings=tuple(opts.lowerings.split(",")), rounds=5, repetitions=20,
                runtime=opts.tune_runtime, conv_choice=opts.conv_choice,
                dispatches=opts.dispatches, per_dispatch=opts.per_dispatch))
        record = records[max(THREADS)]
        ok = [c for c in record.candidates if c.status == "ok"]
        first = next(c for c in ok if c.variant == record.default_variant)
        bundle = build(BuildOptions(recipe=recipe, target="host", out=WORK / key / "inputs",
                                    variant=Variant(
                first.lowering, first.flag_set, tuple(first.flags)))).bundle
        columns: dict[int, dict[str, str]] = {}   # threads → column → runner name
        modules: dict[int, dict[str, str]] = {}   # threads → runner name → module path

        def runner_for(c, threads: int, t: int) -> str:
            """One runner per distinct module and thread count: a column whose module is
            byte-identical to another's (e.g. a conv rewrite on a model without convolutions)
            reads the same measurement."""
            module = module_of(recipe, c, key)
            digest = hashlib.sha256(module.read_bytes()).hexdigest()[:12]
            name = f"{digest}@{threads}"
            modules[t].setdefault(name, str(module))
            return name

        for t in THREADS:
            cols, modules[t] = columns.setdefault(t, {}), {}
            untuned = next(c for c in ok if c.variant == record.default_variant
                           and c.threads == t)
            cols["untuned"] = runner_for(untuned, t, t)
            cols["iree_defaults"] = runner_for(IREE_DEFAULTS, t, t)
            for name, c in best_by_set(record, t).items():
                cols[f"set:{name}"] = runner_for(c, t, t)
            tuned = records[t].chosen
            cols["tuned"] = runner_for(tuned, tuned.threads, t)
            cols["tuned_variant"] = f"{tuned.variant} {tuned.threads}t"
            cols["onnxruntime"], cols["torch"] = f"onnxruntime@{t}", f"torch@{t}"
        timing: dict[str, dict] = {}
        for t in THREADS:
            print(f"timing {key} at {t} thread(s) ({len(modules[t]) + 2} runners)…",
                  file=sys.stderr, flush=True)
            timing.update(_timed_in_own_process(recipe, bundle.path, modules[t], t, opts))
        for t in THREADS:
            cols = columns[t]
            ort_ms = timing[cols["onnxruntime"]]["median_ms"]
            row = {"model": key, "threads": t, "onnxruntime_ms": round(ort_ms, 4),
                   "tuned_in": record.measured_in,
                   # run-to-run spread of the per-round medians, relative: the noise to read
                   # the ratios against
                   "ort_spread_pct": round(100 * timing[cols["onnxruntime"]]["spread_ms"]
                                           / ort_ms, 1),
                   "tuned_spread_pct": round(100 * timing[cols["tuned"]]["spread_ms"]
                                             / timing[cols["tuned"]]["median_ms"], 1),
                   "tuned_variant": cols["tuned_variant"],
                   "untuned_variant": record.default_variant}
            for column, runner in cols.items():
                if column != "tuned_variant":
                    row[f"{column}_x_ort"] = round(timing[runner]["median_ms"] / ort_ms, 3)
            rows.append(row)
    report(rows)
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))


def _timed_in_own_process(recipe: Path, inputs_bundle: Path, modules: dict[str, str],
                          threads: int, opts) -> dict[str, dict]:
    """Time one thread count's runners in a fresh process: onnxruntime's spinning intra-op
    workers, torch's thread pool and IREE's task system from another thread count would
    otherwise compete for this machine's cores between calls."""
    plan = {"recipe": str(recipe), "inputs_bundle": str(inputs_bundle), "modules": modules,
            "threads": threads, "rounds": opts.rounds, "seconds": opts.seconds / len(THREADS),
            "per_call": opts.per_call}
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(plan)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _worker(plan: dict) -> None:
    from edgekit.models.bundle import load_bundle
    warnings.filterwarnings("ignore")
    t = plan["threads"]
    bundle = load_bundle(Path(plan["inputs_bundle"]))
    inputs = [np.load(bundle.file(p)) for p in bundle.manifest.golden_inputs]
    model = load_model(load_recipe(Path(plan["recipe"]))).model
    runners = {name: task_runner(Path(path), inputs, int(name.rsplit("@", 1)[1]))
               for name, path in plan["modules"].items()}
    runners[f"onnxruntime@{t}"] = ort_runner(model, inputs, t)
    runners[f"torch@{t}"] = torch_runner(model, inputs, t)
    print(json.dumps(time_interleaved(runners, plan["rounds"], plan["seconds"],
                                      plan.get("per_call", False))))
    for module in _KEEP:
        module.close()


def report(rows: list[dict]) -> None:
    sets = sorted({k[len("set:"):-len("_x_ort")] for r in rows for k in r
                   if k.startswith("set:")})
    for t in THREADS:
        mine = [r for r in rows if r["threads"] == t]
        geo = {s: math.exp(sum(math.log(r.get(f"set:{s}_x_ort", math.inf)) for r in mine)
                           / len(mine)) for s in sets}
        best = min(geo, key=geo.get)
        print(f"\n{t} thread(s) — ratios to onnxruntime (lower is better); best single flag "
              f"set across models: {best}")
        print(f"{'model':<14}{'ort ms':>9}{'torch':>8}{'IREE dflt':>10}{'untuned':>9}"
              f"{'best set':>10}{'tuned':>8}{'dflt/tuned':>11}{'spread ort/tuned':>18}"
              "  tuned variant (timed in)")
        for r in mine:
            print(f"{r['model']:<14}{r['onnxruntime_ms']:>9.3f}{r['torch_x_ort']:>7.2f}x"
                  f"{r['iree_defaults_x_ort']:>9.2f}x{r['untuned_x_ort']:>8.2f}x"
                  f"{r.get(f'set:{best}_x_ort', math.inf):>9.2f}x{r['tuned_x_ort']:>7.2f}x"
                  f"{r['iree_defaults_x_ort'] / r['tuned_x_ort']:>10.2f}x"
                  f"{r['ort_spread_pct']:>10.1f}%/{r['tuned_spread_pct']:.1f}%"
                  f"  {r['tuned_variant']} ({r['tuned_in']})")
        print("spread: range of the per-round medians over their median, per runner "
              "(the run's noise)")
        print("per flag set:", ", ".join(
            f"{s} " + "/".join(f"{r.get(f'set:{s}_x_ort', math.inf):.2f}" for r in mine)
            for s in sets))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(json.loads(sys.argv[2]))
    else:
        main()
