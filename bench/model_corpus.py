#!/usr/bin/env python3
"""The model corpus (tests/corpus) as a table: model → target → lowering chosen → build time →
max abs error vs eager PyTorch on held-out inputs. docs/explanation/model-corpus.md's table is
this script's `--markdown` output.

Each model is built with the cache off, as `edgekit build --target T` does; the rpi4 module runs
under qemu in the arm64 lab userland (built once per machine, as root). Build times are wall
seconds on the machine that runs it (the docs' are from a 2-core shared machine).

    python bench/model_corpus.py [--markdown] [--targets host,rpi4] [--models bert,gpt2]
    python bench/model_corpus.py --rows stderr.log      # the table again, from a run's rows
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true",
                        help="print the table of docs/explanation/model-corpus.md")
    parser.add_argument("--targets", default="host,rpi4")
    parser.add_argument("--models", default="", help="comma-separated corpus names (all)")
    parser.add_argument("--rows", type=Path, help="render rows printed by an earlier run "
                                                  "(its stderr, JSON lines) instead of building")
    args = parser.parse_args()
    if args.rows:
        rows = [json.loads(ln) for ln in args.rows.read_text().splitlines() if ln[:1] == "{"]
        print(markdown(rows))
        return
    from edgekit.lab.rootfs import ensure_rootfs
    # the arm64 userland that runs rpi4 modules under qemu: the machine's (built once)
    os.environ.setdefault("EDGEKIT_ROOTFS_DIR", str(ensure_rootfs()))
    with tempfile.TemporaryDirectory(prefix="model-corpus-") as scratch:
        # a build cache of its own: the user's is neither read nor filled
        os.environ["EDGEKIT_CACHE_DIR"] = str(Path(scratch) / "cache")
        from tests.corpus.harness import build_and_compare
        from tests.corpus.models import CORPUS
        wanted = set(filter(None, args.models.split(",")))
        rows = []
        for entry in CORPUS:
            if wanted and entry.name not in wanted:
                continue
            for target in args.targets.split(","):
                work = Path(scratch) / f"{entry.name}-{target}"
                work.mkdir()
                o = build_and_compare(entry, target, work)
                rows.append({"model": entry.name, "family": entry.family, "target": target,
                             "lowering": o.lowering, "build_s": round(o.build_seconds, 1),
                             "max_abs_error": o.max_abs_error, "max_abs_output": o.scale,
                             "failed_first": list(o.attempts)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if args.markdown:
        print(markdown(rows))
    else:
        print(json.dumps(rows, indent=1))


def markdown(rows: list[dict]) -> str:
    lines = ["| model | family | target | lowering chosen | build (s) | max abs error vs eager "
             "| lowering that failed first (op, where in the model) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        first = "; ".join(_short(f) for f in r["failed_first"])
        lines.append(f"| {r['model']} | {r['family']} | {r['target']} | {r['lowering']} | "
                     f"{r['build_s']} | {r['max_abs_error']:.1e} (outputs up to "
                     f"{r['max_abs_output']:.1f}) | {first or '—'} |")
    return "\n".join(lines)


def _short(failure: str) -> str:
    """'tosa: tosa.cast (aten.where.self @ encoder…, modeling_bert.py:192): reason' → the part
    before the reason, for a table cell."""
    head = failure.split("): ", 1)[0]
    return (head + ")" if "(" in head else head).replace("|", "/")


if __name__ == "__main__":
    main()
