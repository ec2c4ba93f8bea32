#!/usr/bin/env python3
"""The toolkit's own speed: a cold `edgekit build --no-cache` vs a cache hit, through the real CLI
in fresh processes (as users run it), for example recipes on host. Prints seconds and the ratio
hit / cold (goal: ≤ 5%), and the 1-minute load average (the machine may be shared).

    python bench/cache_hit.py                              # kws_mlp and resnet18
    python bench/cache_hit.py --recipes recipes/kws_mlp.yaml --hits 5 --json out.json

Uses a private cache and home (temporary directories) so that the cold build is cold and no
tuning record steers it. A hit is the median of `--hits` runs after the cold build.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("recipes/kws_mlp.yaml", "recipes/resnet18.yaml")


def _run(args: list[str], env: dict) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgekit", *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"edgekit {' '.join(args)} failed ({done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    return seconds, json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=list(DEFAULT))
    ap.add_argument("--target", default="host")
    ap.add_argument("--hits", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp:
        env = {**os.environ, "EDGEKIT_CACHE_DIR": f"{tmp}/cache", "EDGEKIT_HOME": f"{tmp}/home",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        print(f"{'recipe':28s} {'cold s':>8s} {'hit s':>8s} {'hit/cold':>9s}  "
              f"{'load':>5s}  hit kind")
        for recipe in args.recipes:
            build = ["build", "--recipe", str(ROOT / recipe), "--target", args.target,
                     "--out", f"{tmp}/out/{Path(recipe).stem}"]
            load_before = os.getloadavg()[0]
            cold, result = _run([*build, "--no-cache"], env)
            assert not result["cached"]
            hits, kinds = [], set()
            for _ in range(args.hits):
                seconds, result = _run(build, env)
                assert result["cached"]
                hits.append(seconds)
                kinds.add("sources" if "source key" in result["stage_seconds"] else "export")
            hit = statistics.median(hits)
            load = max(load_before, os.getloadavg()[0])
            rows.append({"recipe": recipe, "cold_s": round(cold, 2), "hit_s": round(hit, 3),
                         "hits_s": [round(h, 3) for h in hits], "ratio": round(hit / cold, 4),
                         "load_1min": round(load, 2), "hit_kind": sorted(kinds),
                         "cold_stages": result.get("stage_seconds")})
            print(f"{recipe:28s} {cold:8.2f} {hit:8.3f} {hit / cold:8.1%}  {load:5.2f}  "
                  f"{'/'.join(sorted(kinds))}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
