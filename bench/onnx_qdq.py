#!/usr/bin/env python3
"""ONNX models quantized by onnxruntime (QDQ): edgekit's int8 module vs onnxruntime running the
same QDQ model, and both fp32 forms — host, 1 thread, one interleaved run, onnxruntime = 1.00×.

For each in-tree model (small CNN, transformer block): export fp32 ONNX, quantize it with
onnxruntime's quantize_static (QDQ, per-channel int8 weights, int8 activations), build both
with edgekit for `host` (the QDQ build takes IREE's ONNX input; its contractions are checked
integer), then time onnxruntime fp32, onnxruntime QDQ (optimized: its int8 kernels), IREE fp32
and IREE int8 in ONE process, interleaved. With `--pt2e SET` (a flag set of
bench/quantization_flags.py), also the PyTorch model quantized by edgekit (PT2E, calibrated)
and built with that set (the ONNX QDQ build takes frontends/onnx_int8.py's rewrite: host's
`u8` form on an AVX-512 VNNI CPU when every contraction has it, else `on`).

    python bench/onnx_qdq.py
    python bench/onnx_qdq.py --models small_cnn --json out.json
    python bench/onnx_qdq.py --models small_cnn --pt2e int8-convs-as-u8-matmul+global-data-tiling

Small CNN, that command with `--per-call` (1 thread, load ~8 on 2 cores, median of round
medians, spread in brackets): onnxruntime fp32 0.0680 ms (0.0050), onnxruntime QDQ 0.0441
(0.0036); edgekit's PT2E int8 (`u8` + global data tiling) 0.0698 (0.0060) = 1.59× onnxruntime's
QDQ, 1.03× onnxruntime fp32. The ONNX builds are host's untuned defaults (torch lowering): fp32
0.2698 (3.97×), QDQ 1.2941 (19.0×; that run predates the ONNX QDQ convolutions' rewrite into
integer matmuls, frontends/onnx_int8.py — the run below has it).

A run (`nice python3 bench/onnx_qdq.py --rounds 11 --per-call`, AVX-512 VNNI host, 1 thread,
load 11 on 2 cores; round spreads 7–14 %): small CNN — onnxruntime fp32 0.069 ms, onnxruntime
QDQ 0.044 (0.64×), edgekit QDQ 0.093 ms = 1.35× onnxruntime fp32, **2.12× onnxruntime QDQ**,
0.35× edgekit's own fp32 ONNX build (0.267 ms); module 0.58× fp32's. Before the QDQ
convolutions became integer matmuls (frontends/onnx_int8.py) the QDQ module was 19.6×
onnxruntime fp32 (3.3 ms: integer direct convolutions). The matmuls are at the bound of
`vpdpwssd` (s8 × s8 data tiling, ~55 of the ~70 µs in dispatches); onnxruntime's kernels use
u8 × s8 `vpdpbusd`. Transformer block — onnxruntime QDQ 0.073 ms, edgekit QDQ 0.058 ms
(**0.80× onnxruntime QDQ**), 2.08× edgekit fp32 (0.028 ms).

Issue 37, round 4 (small CNN, AVX-512 VNNI host, 1 thread, load ~8–11 on 2 cores).
`nice python3 bench/onnx_qdq.py --models small_cnn --rounds 15 --per-call --pt2e
int8-convs-as-u8-matmul+inner-tiled`: onnxruntime fp32 0.0655 ms (0.0075), onnxruntime QDQ
0.0427 (0.0038); edgekit fp32 ONNX build 0.0912 (0.0087) = 1.39× onnxruntime fp32 (was ~4×);
edgekit QDQ 0.0736 (0.0064) = 1.12× onnxruntime fp32, **1.72× onnxruntime QDQ** (was 2.12×),
0.81× edgekit fp32; PT2E u8 0.0704 (0.0066) = 1.65×; module size QDQ / fp32 1.12× (the u8
form's rows × cout epilogue constants). Before → after in ONE run (the builds made by the
previous code and by this one, interleaved, 15 rounds, per call, spreads ≤ 0.006 ms):
onnxruntime fp32 0.0694, QDQ 0.0440; PyTorch-source fp32 0.0978; ONNX fp32 0.2629 → 0.0939
(IREE's ONNX input, NCHW convolutions → tosa tried first for a float model with
convolutions, NHWC: frontends/onnx.py _first_lowerings; linalg, NCHW too, was 0.262); ONNX QDQ
0.0922 (`on`, s8 × s8 on vpdpwssd) → 0.0779 (u8 × s8 through IREE's inner-tiled path,
quantize steps as PT2E's fast form, the mean over NHWC axes: frontends/onnx_int8.py) = 2.10× →
1.77× onnxruntime QDQ; PT2E u8 0.0747 (1.70×). ≤ 1.2× onnxruntime QDQ is not reached by
either int8 path: the same kernels bound both (matmuls ~9–13 µs fastest call each at
~240–360 GOP/s, the patches' encode dispatches ~11 µs, gathers ~5 µs;
bench/dispatch_profile.py --recipe <the QDQ recipe>).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_isa import deny_amx  # noqa: E402
from host_latency import iree_runner, ort_model_runner, time_interleaved  # noqa: E402

from edgekit.examples import models as examples  # noqa: E402
from edgekit.examples.onnx_quantized import export_quantized  # noqa: E402
from edgekit.api.build import BuildOptions, build  # noqa: E402
from edgekit.errors import EdgekitError  # noqa: E402

INPUT_NAMES = {"small_cnn": "image", "transformer_block": "x"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="small_cnn,transformer_block")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of timing per model")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--per-call", action="store_true",
                        help="each round's median call, not its mean (robust to preemption on a "
                             "loaded machine)")
    parser.add_argument("--pt2e", metavar="SET", help="also edgekit's PT2E int8 build with this "
                                                      "flag set of bench/quantization_flags.py")
    parser.add_argument("--no-amx", action="store_true",
                        help="deny AMX to onnxruntime (bench/peer_isa.py): its int8 kernels on "
                             "the instruction set ours use")
    args = parser.parse_args()
    if args.no_amx:
        print(deny_amx())
    work = Path(tempfile.mkdtemp(prefix="edgekit-qdq-bench-"))
    rows = []
    for model in args.models.split(","):
        name = INPUT_NAMES[model]
        paths = export_quantized(work, model, name)
        _, example = getattr(examples, model)()
        inputs = [t.numpy() for t in example]
        runners, notes = {}, {}
        for form in ("fp32", "QDQ"):
            runners[f"onnxruntime {form}"] = ort_model_runner(paths[form].read_bytes(), [name],
                                                              inputs, 1)
            recipe = work / f"{model}-{form}.yaml"
            recipe.write_text(f"name: {model}-{form.lower()}\n"
                              f"model: {{onnx: {paths[form].name}}}\n")
            bundle = build(BuildOptions(recipe=recipe, target="host", out=work / "b" / form,
                                        use_tuned=False)).bundle
            q = bundle.manifest.quantization
            convs = [n for n in bundle.manifest.lowering.note.split("; ")
                     if "int8 convolutions as" in n]
            notes[form] = (f"{q.contractions.integer}/{q.contractions.total} integer"
                           + "".join(f"; {n.split(' (')[0]}" for n in convs) if q
                           else f"lowering {bundle.manifest.lowering.used}")
            runners[f"edgekit {form}"] = iree_runner(bundle.module, inputs, 1)
            notes[f"size {form}"] = bundle.module.stat().st_size
        if args.pt2e:
            from quantization_flags import FLAG_SETS, recipe_for
            profile = work / "host-plain.yaml"
            profile.write_text("extends: host\nquantize_flags: {int8: []}\n")
            try:
                bundle = build(BuildOptions(
                    recipe=recipe_for(model, "int8", FLAG_SETS[args.pt2e], work),
                    target=str(profile), out=work / "b" / "pt2e", use_tuned=False)).bundle
                runners["edgekit PT2E"] = iree_runner(bundle.module, inputs, 1)
                q = bundle.manifest.quantization
                notes["PT2E"] = (f"{args.pt2e}; {q.contractions.integer}/"
                                 f"{q.contractions.total} integer")
            except EdgekitError as exc:
                print(f"{model}: PT2E int8 with {args.pt2e} refused: "
                      f"{exc.what.strip().splitlines()[0][:160]}")
        timed = time_interleaved(runners, args.rounds, args.budget, args.per_call)
        ort = timed["onnxruntime fp32"]["median_ms"]
        for key, t in timed.items():
            rows.append({"model": model, "runner": key, "ms": t["median_ms"],
                         "spread_ms": t["spread_ms"], "vs_ort_fp32": t["median_ms"] / ort,
                         "vs_ort_qdq": t["median_ms"] / timed["onnxruntime QDQ"]["median_ms"],
                         "vs_edgekit_fp32": t["median_ms"] / timed["edgekit fp32"]["median_ms"],
                         "note": notes.get(key.split()[-1], "") if key.startswith("edgekit")
                         else ""})
        rows.append({"model": model, "runner": "module size int8 / fp32",
                     "ratio": notes["size QDQ"] / notes["size fp32"]})
    print("\n| model | runner | ms (round spread) | vs onnxruntime fp32 | vs onnxruntime QDQ | "
          "vs edgekit fp32 | note |\n|---|---|---|---|---|---|---|")
    for r in rows:
        if "ratio" in r:
            print(f"| {r['model']} | {r['runner']} | | {r['ratio']:.2f}× | | | |")
        else:
            print(f"| {r['model']} | {r['runner']} | {r['ms']:.4f} ({r['spread_ms']:.4f}) | "
                  f"{r['vs_ort_fp32']:.2f}× | {r['vs_ort_qdq']:.2f}× | "
                  f"{r['vs_edgekit_fp32']:.2f}× | {r['note']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
