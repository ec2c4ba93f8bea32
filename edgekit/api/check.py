"""`edgekit check`: which operators of a model make it through import, TOSA, Linalg and the
target's compiler (or, for an NPU target, which run on the NPU and which fall back)."""

from __future__ import annotations

from collections.abc import Callable


def check(model: str, target: str = "host", trust_pickle: bool = False,
          on_progress: Callable[[str], None] | None = None):
    """The check report (edgekit.pipeline.check.CheckReport, or an NPU placement report
    with `accelerator`); `report.buildable` says whether a build can succeed, and
    `report.refused` why a build refuses the model before lowering it (the golden check)."""
    from edgekit.pipeline.check import run_check
    return run_check(model, target, trust_pickle=trust_pickle, on_progress=on_progress)


def unsupported_ops(report) -> list[str]:
    """An NPU report's ops that neither the NPU nor its CPU fallback runs."""
    return sorted({r.op for r in report.ops if r.placement == "unsupported"})


__all__ = ["check", "unsupported_ops"]
