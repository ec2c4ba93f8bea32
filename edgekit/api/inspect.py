"""`edgekit inspect BUNDLE --kernels`: the instructions a CPU bundle's dispatches run, read
from its module without the board (compile/kernels.py says how the hot loop is found)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.compile.kernels import KernelReport, kernel_reports, target_cpu
from edgekit.models.bundle import load_bundle


@dataclass(frozen=True)
class Kernels:
    bundle: str
    target: str
    arch: str
    cpu: str                        # what llvm-mca modelled
    dispatches: list[KernelReport]  # biggest function first


def kernels(bundle: Path, top: int | None = None, cpu: str | None = None,
            estimate: bool = True) -> Kernels:
    """Each dispatch's hot-loop census and llvm-mca cycles per iteration (an estimate) for the
    bundle's CPU (`cpu` overrides the one it was compiled for)."""
    with load_bundle(bundle) as opened:
        manifest = opened.manifest
        chosen = cpu or target_cpu(tuple(manifest.compile_flags)) or "generic"
        arch, reports = kernel_reports(opened.module, chosen, top, estimate)
    return Kernels(str(bundle), manifest.target, arch, chosen, reports)
