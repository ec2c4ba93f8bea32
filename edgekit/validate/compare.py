"""Compare actual outputs with golden ones under per-output limits. Pure numpy.

The rules (docs/reference/validation.md):
- shape, then dtype, must be the golden output's;
- integer and bool outputs are equal element for element (unless a tolerance is set for them);
- NaN and ±Inf must sit at the same places with the same values as in the reference; errors and
  cosine are computed over the positions finite in both;
- |actual - expected| <= atol + rtol·|expected| everywhere;
- cosine >= min_cosine for float outputs, where the cosine is defined (neither side all zero)
  and means something (some reference value beyond atol); undefined is reported as such and
  proves nothing;
- arg-max agreement per row: `top1: always`, or `auto` for classifier-shaped outputs only
  (:func:`classifier_shaped`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from edgekit.config.recipe import Tolerance
from edgekit.models.report import OutputComparison, ValidationReport
from edgekit.validate.outputs import read_output
from edgekit.validate.tolerance import Limits, limits, output_limits

# output names that say "class scores" (any case) — and names that say "not a classifier"
CLASSIFIER_WORDS = ("logit", "score", "prob", "class")
NOT_CLASSIFIER_WORDS = ("embed", "hidden", "pool", "feature", "state")
ROW_SUM_SLACK = 1e-3    # rows of probabilities sum to 1 within this


def dtype_name(array: np.ndarray) -> str:
    return str(array.dtype)


def classifier_shaped(name: str, expected: np.ndarray) -> bool:
    """`top1: auto`: a floating-point [N, C] output (C >= 2) whose name says class scores
    (contains logit, score, prob or class) or whose rows are probability distributions
    (softmax: in [0, 1], summing to 1; log-softmax: their exponentials do) — and whose name
    does not say embedding, hidden, pool, feature or state."""
    if expected.dtype.kind != "f" and not _ml_float(expected):
        return False
    if expected.ndim != 2 or expected.shape[1] < 2 or expected.shape[0] < 1:
        return False
    lowered = name.lower()
    if any(w in lowered for w in NOT_CLASSIFIER_WORDS):
        return False
    if any(w in lowered for w in CLASSIFIER_WORDS):
        return True
    rows = expected.astype(np.float64)
    if not np.all(np.isfinite(rows)):
        return False
    if rows.min() >= 0 and rows.max() <= 1:
        return bool(np.all(np.abs(rows.sum(axis=1) - 1) <= ROW_SUM_SLACK))
    if rows.max() <= 0:
        return bool(np.all(np.abs(np.exp(rows).sum(axis=1) - 1) <= ROW_SUM_SLACK))
    return False


def wants_top1(mode: str | None, name: str, expected: np.ndarray) -> bool:
    """Whether arg-max agreement is checked: `always` (any output with a last axis), `never`,
    or `auto`/None: classifier-shaped outputs only."""
    if expected.ndim == 0 or expected.size == 0 or mode == "never":
        return False
    return mode == "always" or classifier_shaped(name, expected)


def _ml_float(array: np.ndarray) -> bool:
    """ml_dtypes' floats (bfloat16, float8_*) are numpy kind 'V'."""
    return dtype_name(array).startswith(("bfloat", "float"))


def compare_output(name: str, actual: np.ndarray, expected: np.ndarray,
                   tol: Tolerance | Limits) -> OutputComparison:
    """One output against its golden value; `tol` as the recipe wrote it (gaps filled by the
    golden dtype's defaults) or already resolved."""
    lim = tol if isinstance(tol, Limits) else limits(tol, dtype_name(expected))
    head = dict(name=name, shape=tuple(expected.shape), dtype=dtype_name(expected),
                limits=lim.describe())
    if actual.shape != expected.shape:
        return failed(head, f"shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        return failed(head, f"dtype {dtype_name(actual)}, expected {dtype_name(expected)}")
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    problems: list[str] = []
    if lim.exact and lim.atol == 0 and lim.rtol == 0:
        differ = actual != expected
        if np.any(differ):
            at = _first(differ)
            problems.append(f"{int(differ.sum())} of {differ.size} values differ (first at "
                            f"{at}: {actual[at].item()}, expected {expected[at].item()})")
    fa, fe = np.isfinite(a), np.isfinite(e)
    if fa.all() and fe.all():     # the common case: no masks, no copies
        af, ef = a.ravel(), e.ravel()
    else:
        nonfinite = ((np.isnan(a) != np.isnan(e)) | (np.isposinf(a) != np.isposinf(e))
                     | (np.isneginf(a) != np.isneginf(e)))
        if np.any(nonfinite):
            at = _first(nonfinite)
            problems.append(f"NaN/Inf at {int(nonfinite.sum())} place(s) where the reference "
                            f"differs (first at {at}: {a[at]:g}, expected {e[at]:g})")
        finite = fa & fe
        af, ef = a[finite], e[finite]
    diff = np.abs(af - ef)
    size = np.abs(ef)
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff / np.maximum(size, np.finfo(np.float32).tiny)).max()) \
        if diff.size else 0.0
    beyond = diff > lim.atol + lim.rtol * size
    if np.any(beyond) and not (lim.exact and lim.atol == 0 and lim.rtol == 0):
        problems.append(f"max abs error {max_abs:.3g} exceeds atol {lim.atol:.3g} + rtol "
                        f"{lim.rtol:.3g}·|expected| at {int(beyond.sum())} of {beyond.size} "
                        f"values")
    cos = _cosine_of_finite(af, ef)
    judged = not lim.exact and cos is not None and float(size.max()) > lim.atol
    if judged and not cos >= lim.min_cosine:
        problems.append(f"cosine {cos:.6f} below {lim.min_cosine}")
    top1 = None
    if wants_top1(lim.top1, name, expected):
        top1 = top1_agreement(a, e)
        if top1 < 1.0:
            problems.append(f"top-1 agreement {top1:.1%}")
    return OutputComparison(**head, max_abs_error=max_abs, max_rel_error=max_rel, cosine=cos,
                            top1_agreement=top1, ok=not problems, problems=tuple(problems))


def with_float32_ratios(comparisons: list[OutputComparison], manifest
                        ) -> tuple[OutputComparison, ...]:
    """Each output's error against float64 goldens as a multiple of eager float32's own (the
    manifest's `float32_error`; a bundle without a float64 reference: as they are). Eager
    float32 exact (0) gives no ratio."""
    eager = manifest.float32_error
    return tuple(c.model_copy(update={"float32_ratio": c.max_abs_error / eager[i]})
                 if i < len(eager) and eager[i] > 0 and math.isfinite(c.max_abs_error) else c
                 for i, c in enumerate(comparisons))


def failed(head: dict, problem: str) -> OutputComparison:
    """A comparison that could not start (no output, wrong shape or dtype, a failed run)."""
    return OutputComparison(**head, max_abs_error=float("inf"), max_rel_error=float("inf"),
                            cosine=None, ok=False, problems=(problem,))


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def top1_agreement(actual: np.ndarray, expected: np.ndarray) -> float:
    """Share of rows (all but the last axis) whose arg-max agrees."""
    rows_a = actual.reshape(-1, actual.shape[-1]).argmax(axis=-1)
    rows_e = expected.reshape(-1, expected.shape[-1]).argmax(axis=-1)
    return float(np.mean(rows_a == rows_e))


def cosine(a: np.ndarray, e: np.ndarray) -> float | None:
    """Cosine similarity of two arrays' finite values; None (undefined) where either is all
    zero, empty or not finite anywhere: two zero vectors are not "the same direction"."""
    a, e = np.asarray(a, np.float64).ravel(), np.asarray(e, np.float64).ravel()
    finite = np.isfinite(a) & np.isfinite(e)
    return _cosine_of_finite(a[finite], e[finite])


def _cosine_of_finite(a: np.ndarray, e: np.ndarray) -> float | None:
    ma = float(np.abs(a).max()) if a.size else 0.0
    me = float(np.abs(e).max()) if e.size else 0.0
    if ma == 0 or me == 0:
        return None
    a, e = a / ma, e / me          # no under- or overflow in the norms
    return float(np.clip(np.dot(a, e) / np.sqrt(np.dot(a, a) * np.dot(e, e)), -1.0, 1.0))


def compare_output_files(bundle, actual: list[Path], where: str,
                         seconds: float = 0.0, golden_outputs: tuple[str, ...] | None = None
                         ) -> ValidationReport:
    """Outputs written by iree-run-module (`output_<i>.npy` or `.bin`: validate/outputs.py, in
    signature order) against the bundle's golden outputs (or `golden_outputs`: another
    sample's) and tolerances; a missing or unreadable file fails its output."""
    m = bundle.manifest
    comparisons = []
    for sig, path, golden in zip(m.outputs, actual, golden_outputs or m.golden_outputs):
        expected = read_output(bundle.file(golden), sig.dtype)
        lim = output_limits(m.tolerances, sig.name, dtype_name(expected))
        if not path.is_file():
            comparisons.append(failed(dict(name=sig.name, shape=tuple(expected.shape),
                                           dtype=dtype_name(expected), limits=lim.describe()),
                                      f"no output file {path.name}"))
            continue
        try:
            got = read_output(path, sig.dtype, expected.shape)
        except (ValueError, EOFError, OSError) as exc:
            comparisons.append(failed(dict(name=sig.name, shape=tuple(expected.shape),
                                           dtype=dtype_name(expected), limits=lim.describe()),
                                      f"unreadable output file {path.name}: {exc}"))
            continue
        comparisons.append(compare_output(sig.name, got, expected, lim))
    return ValidationReport(app=m.app, target=m.target, where=where,
                            ok=all(c.ok for c in comparisons),
                            outputs=with_float32_ratios(comparisons, m),
                            seconds=round(seconds, 4))
