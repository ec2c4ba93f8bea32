#!/usr/bin/env python3
"""Where a module's time goes, per dispatch, from IREE's own HAL profiler.

Builds the recipe for a target that runs here (as `edgekit build` does, or as `--variant`
from the profile's tune flag sets, plus any `--flag`s), runs it under iree-benchmark-module
with `--device_profiling_mode=host-execution` (local-sync, 1 thread) and reads the .ireeprof
with `iree-profile dispatch`. For convolutions and matmuls IREE's dispatch name gives the shape,
hence the GFLOP/s each kernel reaches; the table also says how much of the wall time is spent
outside dispatches (runtime overhead, copies).

    python bench/dispatch_profile.py --recipe recipes/resnet18.yaml
    python bench/dispatch_profile.py --recipe recipes/resnet18.yaml --variant tosa/data-tiling
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.pipeline.build import BuildOptions, Variant, build  # noqa: E402
from edgekit.toolchain import iree  # noqa: E402

_SHAPED = re.compile(r"_(conv|matmul_like|batch_matmul|matmul)_((?:\d+x)+\d+)_f")


def flop_count(name: str) -> float | None:
    """2·∏dims of IREE's conv/matmul dispatch names: conv_HxWxCoutxKhxKw[xCin] (no Cin for
    depthwise), matmul_like_…xNxK, batch_matmul_BxMxNxK."""
    m = _SHAPED.search(name)
    return 2.0 * math.prod(int(d) for d in m.group(2).split("x")) if m else None


def profile(bundle, iterations: int, work: Path) -> tuple[float, list[dict]]:
    """(wall ms per call, per-dispatch rows) from one profiled iree-benchmark-module run."""
    m = bundle.manifest
    trace = work / "run.ireeprof"
    out = subprocess.run(
        [iree.tool_path("iree-benchmark-module"), f"--module={bundle.module}",
         "--device=local-sync", f"--function={m.entry_function}",
         *[f"--input=@{bundle.file(p)}" for p in m.golden_inputs],
         f"--benchmark_min_time={iterations}x", "--benchmark_format=json",
         "--device_profiling_mode=host-execution,executable-metadata",
         f"--device_profiling_output={trace}"],
        check=True, capture_output=True, text=True).stdout
    run = json.loads(out)["benchmarks"][0]
    wall_ms = run["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[run["time_unit"]]
    groups = subprocess.run([iree.tool_path("iree-profile"), "dispatch", "--format=jsonl",
                             str(trace)], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in groups.splitlines():
        g = json.loads(line)
        if g.get("type") != "host_dispatch_group":
            continue
        calls = g["count"] / run["iterations"]
        flops = flop_count(g["key"])
        rows.append({"dispatch": g["key"], "calls": calls, "min_ms": g["min_ns"] / 1e6,
                     "ms_per_inference": g["total_ns"] / 1e6 / run["iterations"],
                     "gflops_at_min": flops / g["min_ns"] if flops else None})
    return wall_ms, sorted(rows, key=lambda r: -r["ms_per_inference"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, required=True)
    parser.add_argument("--target", default="host")
    parser.add_argument("--variant", help="LOWERING/FLAG_SET from the profile's tune flag sets "
                                          "(default: the untuned build)")
    parser.add_argument("--flag", action="append", default=[], dest="flags",
                        help="an extra compile flag on top of the variant's (repeatable)")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    target = load_target(args.target)
    work = Path(tempfile.mkdtemp(prefix="edgekit-dispatch-"))
    variant = None
    if args.variant:
        lowering, _, flag_set = args.variant.partition("/")
        flags = () if flag_set in ("", "default") else tuple(target.tune.flag_sets[flag_set])
        variant = Variant(lowering, flag_set or "default", flags)
    if args.flags:
        # without --variant: the profile's first lowering, default flags
        base = variant or Variant(target.lowering[0], "default", ())
        variant = Variant(base.lowering, base.flag_set + "+extra", base.flags + tuple(args.flags))
    bundle = build(BuildOptions(recipe=args.recipe, target=args.target, variant=variant,
                                use_tuned=False, out=work / "bundle")).bundle
    wall, rows = profile(bundle, args.iterations, work)
    in_dispatches = sum(r["ms_per_inference"] for r in rows)
    print(f"\n{bundle.manifest.app} for {target.name}, {args.variant or 'untuned'} "
          f"(lowering {bundle.manifest.lowering.used}): wall {wall:.2f} ms per call, "
          f"{in_dispatches:.2f} ms in {len(rows)} dispatch kinds "
          f"({in_dispatches / wall:.0%}); 1 thread, local-sync\n")
    print("| dispatch | calls | ms per call (all) | share | fastest ms | GFLOP/s at fastest |\n"
          "|---|---|---|---|---|---|")
    for r in rows[:args.top]:
        gflops = f"{r['gflops_at_min']:.1f}" if r["gflops_at_min"] else ""
        print(f"| {r['dispatch']} | {r['calls']:g} | {r['ms_per_inference']:.3f} | "
              f"{r['ms_per_inference'] / wall:.1%} | {r['min_ms']:.3f} | {gflops} |")
    if args.json:
        args.json.write_text(json.dumps({"wall_ms": wall, "dispatches": rows}, indent=2))


if __name__ == "__main__":
    main()
