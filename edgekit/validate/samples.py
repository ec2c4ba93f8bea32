"""Validation over several samples: one report whose outputs are each output's worst sample."""

from __future__ import annotations

import math

from edgekit.models.report import ValidationReport


def worst_per_output(reports: list[ValidationReport]) -> ValidationReport:
    """The reports of one module on several samples (the bundle's golden set first) as one:
    ok only when every sample passed; per output, the comparison of the first sample that
    failed it (its problems say which sample), else the one with the largest error."""
    if len(reports) == 1:
        return reports[0]
    merged = []
    for i, first in enumerate(reports[0].outputs):
        per_sample = [(k, r.outputs[i]) for k, r in enumerate(reports) if i < len(r.outputs)]
        failing = [(k, c) for k, c in per_sample if not c.ok]
        if failing:
            k, worst = failing[0]
            worst = worst.model_copy(update={"problems": tuple(
                f"sample {k}: {p}" for p in worst.problems) or (f"sample {k}",)})
        else:
            worst = max((c for _, c in per_sample), key=lambda c: _error(c.max_abs_error))
        merged.append(worst)
    return reports[0].model_copy(update={
        "ok": all(r.ok for r in reports), "outputs": tuple(merged),
        "seconds": round(sum(r.seconds for r in reports), 4), "samples": len(reports)})


def _error(value: float) -> float:
    return math.inf if math.isnan(value) else value

