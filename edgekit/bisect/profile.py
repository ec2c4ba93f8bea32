"""Each tap's value from the build against the host reference; the first that leaves
tolerance. Pure logic over arrays (the comparison is validation's own, per tap)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from edgekit.bisect.taps import Tap
from edgekit.config.recipe import Validation
from edgekit.models.report import OutputComparison
from edgekit.validate.compare import compare_output, dtype_name
from edgekit.validate.tolerance import output_limits


@dataclass(frozen=True)
class TapResult:
    tap: Tap
    check: OutputComparison                 # against what the build is held to
    fp32: OutputComparison | None = None    # a quantized build: against the float model


@dataclass(frozen=True)
class Level:
    name: str                    # "module boundaries" | "ops of <module>"
    rows: tuple[TapResult, ...]

    @property
    def first_failing(self) -> int | None:
        return next((i for i, r in enumerate(self.rows) if not r.check.ok), None)

    @property
    def outputs_fail(self) -> bool:
        """Whether one of the model's own outputs leaves tolerance (what validation sees)."""
        return any(not r.check.ok for r in self.rows if r.tap.output)


def profile(name: str, taps: list[Tap], actual: list[np.ndarray],
            reference: tuple[np.ndarray, ...], tolerances: Validation,
            fp32: tuple[np.ndarray, ...] | None = None, folded_norms: bool = False) -> Level:
    """One row per tap, in execution order. An intermediate tensor is held to the tolerance of
    the model's outputs (atol, rtol, cosine); arg-max agreement is for the model's outputs."""
    rows = []
    folded = _folded(taps) if fp32 is not None and folded_norms else set()
    for i, (tap, got, want) in enumerate(zip(taps, actual, reference)):
        lim = output_limits(tolerances, f"output_{i}", dtype_name(want))
        if not tap.output:
            lim = dataclasses.replace(lim, top1="never")
        label = tap.module or "(model)"
        rows.append(TapResult(tap, compare_output(label, got, want, lim),
                              compare_output(label, got, fp32[i], lim)
                              if fp32 is not None and i not in folded else None))
    return Level(name, tuple(rows))


def _folded(taps: list[Tap]) -> set[int]:
    """Convolutions right before a batch norm: PT2E folds the norm into the convolution's
    weights, so in a quantized build that tap holds conv+norm, which has no float twin."""
    return {i for i in range(len(taps) - 1)
            if taps[i].op.startswith("aten.conv") and "batch_norm" in taps[i + 1].op}
