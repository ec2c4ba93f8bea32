"""How much a quantized model differs from the fp32 model on held-out samples."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from edgekit.errors import QuantizationError
from edgekit.models.bundle import AccuracyReport, OutputAccuracy
from edgekit.config.recipe import Validation
from edgekit.validate.compare import cosine, top1_agreement, wants_top1

Run = Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]]


def accuracy_report(reference: Run, quantized: Run, samples: Sequence[tuple[np.ndarray, ...]],
                    source: str, names: Sequence[str],
                    validation: Validation = Validation()) -> AccuracyReport:
    """Top-1 agreement is reported where validation checks it (the recipe's `top1`, else
    classifier-shaped outputs: validate/compare.py)."""
    pairs = [(reference(s), quantized(s)) for s in samples]
    outputs = []
    for i, name in enumerate(names):
        expected = [p[0][i].astype(np.float64) for p in pairs]
        actual = [p[1][i].astype(np.float64) for p in pairs]
        # undefined cosines (a side all zero) prove nothing: the abs error judges those
        cosines = [c for c in (cosine(a, e) for a, e in zip(actual, expected)) if c is not None]
        top1 = None
        if wants_top1(validation.for_output(name).top1, name, pairs[0][0][i]):
            top1 = float(np.mean([top1_agreement(a, e) for a, e in zip(actual, expected)]))
        outputs.append(OutputAccuracy(
            name=name, max_abs_error=float(max((np.abs(a - e).max() if a.size else 0.0)
                                               for a, e in zip(actual, expected))),
            min_cosine=float(np.min(cosines)) if cosines else None,
            mean_cosine=float(np.mean(cosines)) if cosines else None,
            top1_agreement=top1))
    return AccuracyReport(samples=len(samples), source=source, outputs=tuple(outputs))


def check_floor(report: AccuracyReport, floor: float | None, mode: str, where: str) -> None:
    """Fail the build when any output's worst held-out cosine is below the recipe's floor."""
    if floor is None:
        return
    # None: no sample had a defined cosine (all-zero outputs), judged by the abs error instead
    low = [o for o in report.outputs if o.min_cosine is not None and o.min_cosine < floor]
    if low:
        worst = min(low, key=lambda o: o.min_cosine)
        raise QuantizationError(
            f"{mode}: output '{worst.name}' has cosine {worst.min_cosine:.6f} vs fp32 on "
            f"held-out samples, below the recipe's floor min_cosine {floor}",
            where=where,
            hint="calibrate on more representative samples, try `weights: per-channel` or "
                 "`int8-weights`/`fp16`, or lower `quantize.min_cosine`")
