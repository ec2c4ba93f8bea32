#!/usr/bin/env python3
"""One matmul, three kernels: IREE's (as edgekit builds it) vs onnxruntime's (MLAS) vs PyTorch's.

Why the reference CNNs stay behind onnxruntime after tuning: `bench/dispatch_profile.py` shows
that their time is in contractions, and the tuned ResNet18-like module already computes its
small-output convolutions as im2col + matmul (`--edgekit-convs-as-matmul`). This times those
very matmuls alone — same shapes, weights constant as in the model — so what is left is the
kernel: IREE's data-tiled f32 matmul against MLAS and PyTorch's on the same core, 1 thread,
interleaved rounds (IREE on local-sync, as a tuned one-thread build runs).

    python bench/matmul_kernels.py [--rounds 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_latency import iree_runner, ort_runner, time_interleaved, torch_runner  # noqa: E402

from edgekit.pipeline.build import BuildOptions, Variant, build  # noqa: E402

# (rows M, depth K, columns N): activations [M, K] times constant weights [K, N]
SHAPES = {
    "resnet18 3x3 conv, 7² out (im2col)": (49, 4608, 512),
    "resnet18 3x3 conv, 14² out (im2col)": (196, 2304, 256),
    "resnet18 3x3 conv, 28² out (im2col)": (784, 1152, 128),
    "mobilenet_v2 1x1 conv, 56² out": (3136, 24, 144),
    "mobilenet_v2 1x1 conv, 7² out": (49, 320, 1280),
}
VARIANTS = {"iree data-tiling": Variant("tosa", "data-tiling", ("--iree-opt-data-tiling",)),
            "iree dt+ukernels": Variant("tosa", "dt-ukernels", (
                "--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=all")),
            "iree default": Variant("tosa", "default", ())}


class ConstantWeightMatmul(torch.nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(k, n) / k ** 0.5)

    def forward(self, x):
        return x @ self.weight


def __getattr__(name: str):
    """Model factories `mm_M_K_N`, for the recipes this script writes."""
    if not name.startswith("mm_"):
        raise AttributeError(name)
    m, k, n = (int(d) for d in name[3:].split("_"))

    def factory():
        torch.manual_seed(0)
        return ConstantWeightMatmul(k, n).eval(), (torch.randn(m, k),)
    return factory


def module_for(shape: tuple[int, int, int], variant: Variant, work: Path):
    m, k, n = shape
    recipe = work / f"mm_{m}_{k}_{n}.yaml"
    recipe.write_text(f"name: mm-{m}-{k}-{n}\nmodel:\n  python: "
                      f"\"{Path(__file__).resolve()}:mm_{m}_{k}_{n}\"\n")
    return build(BuildOptions(recipe=recipe, target="host", variant=variant, use_tuned=False,
                              out=work / f"{recipe.stem}-{variant.flag_set}")).bundle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=6.0, help="timing budget per shape")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    work = Path(tempfile.mkdtemp(prefix="edgekit-matmul-"))
    rows = []
    for label, shape in SHAPES.items():
        m, k, n = shape
        bundles = {name: module_for(shape, v, work) for name, v in VARIANTS.items()}
        first = next(iter(bundles.values()))
        inputs = [np.load(first.file(p)) for p in first.manifest.golden_inputs]
        model = __getattr__(f"mm_{m}_{k}_{n}")()[0]
        runners = {name: iree_runner(b.module, inputs, 1) for name, b in bundles.items()}
        runners["onnxruntime"] = ort_runner(model, inputs, 1)
        runners["torch"] = torch_runner(model, inputs, 1)
        timing = time_interleaved(runners, opts.rounds, opts.seconds)
        gflop = 2 * m * k * n / 1e9
        row = {"shape": label, "m": m, "k": k, "n": n}
        for name, t in timing.items():
            row[f"{name}_ms"] = round(t["median_ms"], 4)
            row[f"{name}_gflops"] = round(gflop / (t["median_ms"] / 1e3), 1)
        rows.append(row)
        print(f"{label:<38} M{m:>5} K{k:>5} N{n:>5}  " + "  ".join(
            f"{name} {row[f'{name}_gflops']:6.1f}" for name in runners) + "  GFLOP/s",
            flush=True)
    print("\nratio to onnxruntime (time, lower is better):")
    for r in rows:
        print(f"  {r['shape']:<38} " + "  ".join(
            f"{name} {r[f'{name}_ms'] / r['onnxruntime_ms']:.2f}x"
            for name in (*VARIANTS, "torch")))
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
