#!/usr/bin/env python3
"""Where the time goes: per-dispatch latency of an edgekit build, with IREE's own tools.

Builds the recipe for `host` with a given variant (lowering/flag set of the profile) and
`--iree-hal-dump-executable-benchmarks-to`, compiles every dumped dispatch benchmark with
iree-compile and times it with iree-benchmark-module (1 thread, local-sync), then prints the
dispatches by time with their share of the sum. The dispatch names say what they compute
(e.g. `conv_1x64x56x56x64x3x3_f32`, `matmul_…`, `elementwise_…`, `slow_memcpy`).

    python bench/dispatch_profile.py recipes/resnet18.yaml --variant tosa/default --top 15
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.pipeline.build import BuildOptions, Variant, build  # noqa: E402
from edgekit.pipeline.tune import DEFAULT_SET  # noqa: E402
from edgekit.toolchain import iree  # noqa: E402


def profile(recipe: Path, variant_name: str, workdir: Path) -> list[dict]:
    lowering, _, flag_set = variant_name.partition("/")
    target = load_target("host")
    flags = () if flag_set == DEFAULT_SET else tuple(target.tune.flag_sets[flag_set])
    dumps = workdir / "dispatches"
    dump_flag = f"--iree-hal-dump-executable-benchmarks-to={dumps}"
    build(BuildOptions(recipe=recipe, target="host", out=workdir / "bundle", use_cache=False,
                       variant=Variant(lowering, flag_set, (*flags, dump_flag))))
    rows = []
    for source in sorted(dumps.glob("*.mlir")):
        vmfb = source.with_suffix(".vmfb")
        compiled = subprocess.run([iree.tool_path("iree-compile"), str(source), "-o", str(vmfb),
                                   *iree.target_flags(target), *flags], capture_output=True)
        if compiled.returncode != 0:
            rows.append({"dispatch": source.stem.split("_embedded")[0].removeprefix("module_"),
                         "what": "(dump does not compile standalone)", "ms": 0.0})
            continue
        proc = subprocess.run([iree.tool_path("iree-benchmark-module"), f"--module={vmfb}",
                               "--device=local-sync", "--benchmark_format=json",
                               "--benchmark_repetitions=3"], capture_output=True, check=True)
        runs = [b for b in json.loads(proc.stdout)["benchmarks"]
                if b.get("run_type") == "iteration"]
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0}
        ms = sorted(b["real_time"] * scale[b.get("time_unit", "ns")] for b in runs)[len(runs) // 2]
        name = re.sub(r"^.*_dispatch_\d+_", "", runs[0]["name"].split("/")[0])
        rows.append({"dispatch": source.stem.split("_embedded")[0].removeprefix("module_"),
                     "what": name, "ms": ms})
    return sorted(rows, key=lambda r: r["ms"], reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--variant", default="tosa/default", help="lowering/flag-set")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgekit-dispatches-") as tmp:
        rows = profile(opts.recipe, opts.variant, Path(tmp))
    total = sum(r["ms"] for r in rows)
    kinds: dict[str, float] = {}
    for r in rows:
        kind = re.sub(r"_\d.*$", "", r["what"])
        kinds[kind] = kinds.get(kind, 0.0) + r["ms"]
    print(f"{opts.recipe.name} {opts.variant}: {len(rows)} dispatches, {total:.3f} ms summed")
    for r in rows[:opts.top]:
        print(f"  {r['ms']:9.3f} ms {100 * r['ms'] / total:5.1f}%  {r['what']}")
    print("by kind:", ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in
                                 sorted(kinds.items(), key=lambda kv: -kv[1])))
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
