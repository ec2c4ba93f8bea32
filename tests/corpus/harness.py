"""Build one corpus model for a target and compare its module with eager PyTorch on inputs the
build never saw (the golden samples are the factory's; held-out inputs come from other seeds).

An aarch64 module runs under qemu in the arm64 lab userland (the Raspberry Pi stand-in), with
the aarch64 iree-run-module a device gets: the same binary, no Python on the "device".
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils import _pytree as pytree

from edgekit import BuildOptions, build
from edgekit.device.provision import runtime_tools
from edgekit.lab.rootfs import rootfs_path
from edgekit.toolchain import iree
from edgekit.toolchain.versions import iree_runtime_version
from tests.corpus import models
from tests.corpus.models import Entry

HELD_OUT_SEEDS = (101, 202)


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    target: str
    lowering: str
    build_seconds: float
    max_abs_error: float          # over every output of every held-out input
    scale: float                  # the largest |eager output|: what the error compares to
    attempts: tuple[str, ...]     # "tosa: <why it failed>" for the lowerings that did not work


def build_and_compare(entry: Entry, target: str, workdir: Path) -> Outcome:
    recipe = workdir / f"{entry.name}.yaml"
    recipe.write_text(f'name: {entry.name}\nmodel:\n  python: "{entry.python}"\n')
    started = time.perf_counter()
    result = build(BuildOptions(recipe=recipe, target=target, out=workdir / f"{entry.name}-"
                                f"{target}", use_cache=False))
    seconds = time.perf_counter() - started
    manifest = result.bundle.manifest
    model, _ = getattr(models, entry.factory)()
    worst, scale = 0.0, 0.0
    for seed in HELD_OUT_SEEDS:
        inputs = entry.held_out(seed)
        with torch.no_grad():
            expected = [t.numpy() for t in pytree.tree_leaves(model(*inputs))
                        if isinstance(t, torch.Tensor)]
        got = run_module(result.bundle.module, manifest.arch, manifest.runtime_driver,
                         manifest.entry_function, [t.numpy() for t in inputs], len(expected))
        for e, g in zip(expected, got, strict=True):
            assert e.shape == g.shape, f"{entry.name}: output shape {g.shape}, eager {e.shape}"
            worst = max(worst, float(np.max(np.abs(e.astype(np.float64) - g))))
            scale = max(scale, float(np.max(np.abs(e))))
    failed = tuple(f"{a.lowering}: {a.error}" for a in manifest.lowering.attempts if not a.ok)
    return Outcome(entry, target, manifest.lowering.used, seconds, worst, scale, failed)


def run_module(module: Path, arch: str, driver: str, function: str,
               inputs: list[np.ndarray], count: int) -> list[np.ndarray]:
    """The module's outputs on `inputs`, run by iree-run-module of the module's arch."""
    with tempfile.TemporaryDirectory(prefix="corpus-") as scratch:
        ins = [Path(scratch) / f"in_{i}.npy" for i in range(len(inputs))]
        outs = [Path(scratch) / f"out_{i}.npy" for i in range(count)]
        for path, array in zip(ins, inputs):
            np.save(path, array)
        if arch == "aarch64":
            tool = runtime_tools("aarch64", iree_runtime_version()) / "iree-run-module"
            argv = ["qemu-aarch64-static", "-L", str(rootfs_path()),
                    *iree.run_module_argv(module, driver, function, ins, outs, str(tool))]
        else:
            argv = iree.run_module_argv(module, driver, function, ins, outs)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{' '.join(argv)}: {proc.stderr[-2000:]}"
        return [np.load(p) for p in outs]
