#!/usr/bin/env python3
"""`edgekit quantize search` on the in-tree small CNN (recipes/small_cnn_int8.yaml) and the
MobileNetV2-like model: the per-layer ranking, the frontier, and the chosen build's speed
against the all-int8 and fp32 builds measured in the same run (interleaved round by round, in
process, one thread: the search's own timing).

Neither model has a labelled set, so each gets one here: random images (normal, as their
calibration), labelled by the float model's own arg-max — the metric is agreement with the
float model (reference 1.0; drop = the share of images int8 classifies differently): top-1 for
the small CNN, top-5 (the float arg-max among int8's five best) for MobileNetV2-like (below).

    python bench/quantize_search.py
    python bench/quantize_search.py --models small_cnn --max-drop 0.02 --json out.json

`nice python3 bench/quantize_search.py --models small_cnn,mobilenet_v2 --samples 48` (1 thread,
per-call p50 in one process, a loaded 2-core machine, 2026-12-02): small CNN — every layer adds
≤ 2e-4; all-int8 chosen (top-1 agreement 1.0): 0.0908 ms = 0.99× fp32 (0.0915), keeping one
conv float 3.2×. MobileNetV2-like, now all 52 convolutions + the head int8 (53 layers; before,
`padding="same"` left 47 float) — layers add ≤ 0.051 (features.17's projection worst);
all-int8 top-5 agreement 1.0 (top-1 0.77, see MODELS), chosen: 25.30 ms = 2.03× fp32
(12.45 ms); + 1 float layer 26.20 ms. int8 slower than fp32 here is issue 37's. Re-run with
this round's requantization and the int8 tolerance from the reference's spread, machine
otherwise idle (`--models mobilenet_v2 --samples 48`, 91 s): the same ranking and choice,
all-int8 top-5 agreement 1.0 chosen, 19.36 ms = 1.71× fp32 (11.33 ms), + 1 float layer 21.16 ms.
With the depthwise convolutions as integer tap sums and the 224² model's 1×1 convolutions on
the s8 form (pipeline/rewrite_int8_depthwise.py, rewrite_int8.U8_MAX_EPILOGUE; `nice …
--models mobilenet_v2 --samples 48`, a loaded machine, 2026-12-03): the same ranking, all-int8
top-5 agreement 1.0 chosen, **8.37 ms = 0.70× fp32** (11.95 ms), + 1 float layer 9.22 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.api.quantize import SearchOptions, search  # noqa: E402
from edgekit.examples import models as examples  # noqa: E402

MODELS = {
    # name: (factory, input shape, recipe extras, metric)
    "small_cnn": ("small_cnn", (1, 3, 32, 32),
                  "calibration: \"edgekit.examples.models:small_cnn_calibration\"", "top1"),
    # top-5: an untrained 1000-class model's logits are nearly tied on random images (median
    # top-1/top-2 margin a third of the logits' spread), so int8's output cosine of ~0.985 flips
    # a quarter of the top-1 labels (all-int8 top-1 agreement 0.77) — noise, not a verdict.
    # Every convolution is integer now (padding="same" ones too); the flag stays for the
    # candidates that keep layers float.
    "mobilenet_v2": ("mobilenet_v2_like", (1, 3, 224, 224),
                     "calibration: calib.npz, allow_float_contractions: true", "top5"),
}

RECIPE = """name: {name}-qsearch
model:
  python: edgekit.examples.models:{factory}
inputs:
  - name: image
    shape: {shape}
validation:
  top1: always
  dataset: {{samples: set.npz, labels: labels.npy, metric: {metric}, max_drop: {max_drop}}}
quantize: {{mode: int8, {extras}, max_drop: {max_drop}}}
"""


def write_recipe(folder: Path, name: str, samples: int, max_drop: float) -> Path:
    import torch
    factory, shape, extras, metric = MODELS[name]
    model, _ = getattr(examples, factory)()
    rng = np.random.default_rng(7)
    images = rng.standard_normal((samples, *shape)).astype(np.float32)
    with torch.no_grad():
        labels = np.array([int(model(torch.from_numpy(x)).argmax()) for x in images])
    np.savez(folder / "set.npz", image=images)
    np.save(folder / "labels.npy", labels)
    np.savez(folder / "calib.npz",
             image=rng.standard_normal((16, *shape)).astype(np.float32))
    recipe = folder / f"{name}.yaml"
    recipe.write_text(RECIPE.format(name=name.replace("_", "-"), factory=factory,
                                    shape=list(shape), extras=extras, metric=metric,
                                    max_drop=max_drop))
    return recipe


def report(name: str, result) -> dict:
    print(f"\n== {name}: {len(result.layers)} layers; {result.metric} agreement with fp32, "
          f"max_drop {result.max_drop:g}; {result.seconds['total']:.0f} s")
    print("  worst layers (error added in all-int8, 1 - cosine):",
          ", ".join(f"{e.layer} {e.added:.4f}" for e in result.layers[:5]
                    if e.added is not None))
    front = {id(c) for c in result.frontier}
    print(f"  {'build':<18} {'float layers':<40} {'score':>7} {'drop':>8} {'p50 ms':>9}")
    for c in result.candidates:
        mark = " chosen" if c is result.chosen else ""
        mark += " frontier" if id(c) in front else ""
        layers = ", ".join(c.float_layers) or "-"
        print(f"  {c.name:<18} {layers[:40]:<40} {c.score:7.4f} {c.drop:+8.4f} "
              f"{c.p50_ms:9.4f}{mark}")
    by = {c.name: c for c in result.candidates}
    chosen = result.chosen
    row = {"model": name, "layers": len(result.layers), "max_drop": result.max_drop,
           "candidates": [{"name": c.name, "float_layers": list(c.float_layers),
                           "score": c.score, "drop": c.drop, "p50_ms": c.p50_ms}
                          for c in result.candidates],
           "chosen": chosen.name if chosen else None}
    if chosen is None:
        print("  no candidate met max_drop")
        return row
    row["vs_int8"] = chosen.p50_ms / by["int8"].p50_ms
    row["vs_fp32"] = chosen.p50_ms / by["fp32"].p50_ms
    print(f"  chosen {chosen.name}: {chosen.p50_ms:.4f} ms = {row['vs_int8']:.2f}× all-int8 "
          f"({by['int8'].p50_ms:.4f} ms), {row['vs_fp32']:.2f}× fp32 "
          f"({by['fp32'].p50_ms:.4f} ms)")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--samples", type=int, default=64, help="labelled images per model")
    parser.add_argument("--max-drop", type=float, default=0.02)
    parser.add_argument("--max-float", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix=f"edgekit-qsearch-{name}-") as scratch:
            folder = Path(scratch)
            recipe = write_recipe(folder, name, args.samples, args.max_drop)
            started = time.perf_counter()
            result = search(SearchOptions(recipe=recipe, target="host", max_float=args.max_float,
                                          rounds=args.rounds, out=folder / "builds"),
                            say=lambda s, t=started: print(
                                f"  [{time.perf_counter() - t:6.1f} s] {s}", flush=True))
            rows.append(report(name, result))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
