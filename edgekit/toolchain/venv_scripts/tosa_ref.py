"""Runs INSIDE the tosa venv (never imported by edgekit): the TOSA reference model on one
partition, against the quantized PyTorch model's outputs for it.

argv: part.tosa part.npz result.json outputs.npz. part.npz holds i<s>_<j> (input j of sample
s) and o<s>_<k> (the golden output k). Writes result.json: {"worst_lsb": int, "samples": n,
"outputs": [[shape, dtype], …]} and the reference model's outputs (o<s>_<k>) to outputs.npz;
exits 3 when the reference model rejects the graph.
Standalone on purpose: only numpy and tosa_reference_model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tosa_reference_model


def _rows(npz, prefix: str) -> dict[int, list[np.ndarray]]:
    rows: dict[int, dict[int, np.ndarray]] = {}
    for key in npz.files:
        if key.startswith(prefix):
            s, j = key[len(prefix):].split("_")
            rows.setdefault(int(s), {})[int(j)] = npz[key]
    return {s: [row[j] for j in sorted(row)] for s, row in rows.items()}


def main() -> int:
    graph, arrays, out = sys.argv[1], np.load(sys.argv[2]), Path(sys.argv[3])
    produced = {}
    binary = Path(graph).read_bytes()
    inputs, golden = _rows(arrays, "i"), _rows(arrays, "o")
    worst, shapes = 0, []
    for s in sorted(inputs):
        outputs, status = tosa_reference_model.run(binary, inputs[s])
        if "VALID" not in str(status):
            print(f"the TOSA reference model rejected the graph: {status}", file=sys.stderr)
            return 3
        for k, got in enumerate(outputs):
            produced[f"o{s}_{k}"] = got
        for got, want in zip(outputs, golden[s]):
            if got.shape != want.shape:
                print(f"output shape {got.shape} is not the golden {want.shape}", file=sys.stderr)
                return 3
            worst = max(worst, int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max()))
        shapes = [[list(o.shape), str(o.dtype)] for o in outputs]
    np.savez(sys.argv[4], **produced)
    out.write_text(json.dumps({"worst_lsb": worst, "samples": len(inputs), "outputs": shapes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
