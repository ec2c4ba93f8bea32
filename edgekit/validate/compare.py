"""Compare actual outputs with golden ones under per-output tolerances. Pure numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgekit.config.recipe import Tolerance
from edgekit.models.report import OutputComparison, ValidationReport
from edgekit.validate.arrays import read_array


def looks_like_logits(expected: np.ndarray) -> bool:
    """Float [..., classes] with a handful of classes or more: arg-max agreement means something."""
    return (np.issubdtype(expected.dtype, np.floating) and expected.ndim >= 2
            and expected.shape[-1] >= 2)


def compare_output(name: str, actual: np.ndarray, expected: np.ndarray,
                   tol: Tolerance) -> OutputComparison:
    problems: list[str] = []
    if actual.shape != expected.shape:
        return OutputComparison(name=name, shape=tuple(expected.shape), max_abs_error=float("inf"),
                                max_rel_error=float("inf"), cosine=float("nan"), ok=False,
                                problems=(f"shape {actual.shape} != expected {expected.shape}",))
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    if not np.all(np.isfinite(a) == np.isfinite(e)):
        problems.append("non-finite values (NaN/Inf) where the reference has none")
    finite = np.isfinite(a) & np.isfinite(e)
    diff = np.abs(a - e)[finite]
    max_abs = float(diff.max()) if diff.size else 0.0
    rel = diff / np.maximum(np.abs(e[finite]), np.finfo(np.float32).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    cosine_value = cosine(a, e)
    if diff.size and np.any(diff > tol.atol + tol.rtol * np.abs(e[finite])):
        problems.append(f"max abs error {max_abs:.3g} exceeds atol {tol.atol:g} + "
                        f"rtol {tol.rtol:g}")
    if not cosine_value >= tol.min_cosine:  # also catches NaN
        problems.append(f"cosine {cosine_value:.6f} below {tol.min_cosine}")
    top1 = None
    if tol.top1 == "always" or (tol.top1 == "auto" and looks_like_logits(expected)):
        top1 = top1_agreement(a, e)
        if top1 < 1.0:
            problems.append(f"top-1 agreement {top1:.1%}")
    return OutputComparison(name=name, shape=tuple(expected.shape), max_abs_error=max_abs,
                            max_rel_error=max_rel, cosine=cosine_value, top1_agreement=top1,
                            ok=not problems, problems=tuple(problems))


def top1_agreement(actual: np.ndarray, expected: np.ndarray) -> float:
    """Share of rows (all but the last axis) whose arg-max agrees."""
    rows_a = actual.reshape(-1, actual.shape[-1]).argmax(axis=-1)
    rows_e = expected.reshape(-1, expected.shape[-1]).argmax(axis=-1)
    return float(np.mean(rows_a == rows_e))


def cosine(a: np.ndarray, e: np.ndarray) -> float:
    a, e = a.ravel(), e.ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(e))):
        return float("nan")
    na, ne = np.linalg.norm(a), np.linalg.norm(e)
    if na == 0 and ne == 0:
        return 1.0
    if na == 0 or ne == 0:
        return 0.0
    return float(np.dot(a, e) / (na * ne))


def compare_output_files(bundle, actual: list[Path], where: str,
                         seconds: float = 0.0, golden_outputs: tuple[str, ...] | None = None
                         ) -> ValidationReport:
    """Outputs written by iree-run-module (`output_<i>.npy`, in signature order) against the
    bundle's golden outputs (or `golden_outputs`: another sample's) and tolerances; a missing
    file fails its output."""
    m = bundle.manifest
    comparisons = []
    for sig, path, golden in zip(m.outputs, actual, golden_outputs or m.golden_outputs):
        expected = read_array(bundle.file(golden), sig.dtype)
        if not path.is_file():
            comparisons.append(OutputComparison(
                name=sig.name, shape=tuple(expected.shape), max_abs_error=float("inf"),
                max_rel_error=float("inf"), cosine=float("nan"), ok=False,
                problems=(f"no output file {path.name}",)))
            continue
        comparisons.append(compare_output(sig.name, read_array(path, sig.dtype, expected.shape),
                                          expected, m.tolerances.for_output(sig.name)))
    return ValidationReport(app=m.app, target=m.target, where=where,
                            ok=all(c.ok for c in comparisons), outputs=tuple(comparisons),
                            seconds=round(seconds, 4))
