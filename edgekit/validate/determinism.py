"""The determinism rule: one module, one input, run R times on the device — every run's outputs
must agree with the others within the output's tolerance. Pure numpy.

A backend that is right once and wrong on some runs (a race in a GPU driver, a torn buffer)
passes a single validation run by luck. Runs are compared with the majority: the reference is
run 0 unless most runs disagree with it, in which case run 0 is the odd one (and is named).

Detection odds: a fault that hits each call independently with probability p escapes R runs
of S samples with probability (1 - p)^(R·S) — :func:`escape_probability`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgekit.validate.compare import compare_output
from edgekit.validate.tolerance import Limits


@dataclass(frozen=True)
class Disagreement:
    """The first run (of a sample) whose outputs differ from the majority's beyond tolerance."""

    sample: int
    run: int
    output: str
    worst: float          # the largest |difference| (inf: NaN/Inf or shape where they differ)
    reference_run: int
    problem: str          # compare_output's first problem, for the message

    def describe(self, runs: int) -> str:
        return (f"sample {self.sample}, run {self.run} of {runs}: output '{self.output}' "
                f"differs from run {self.reference_run} (worst difference {self.worst:.3g}; "
                f"{self.problem})")


def first_disagreement(sample: int, runs: Sequence[Sequence[np.ndarray]],
                       names: Sequence[str], limits: Sequence[Limits]) -> Disagreement | None:
    """`runs[r][i]`: output i of run r. None when every run agrees with the reference run."""
    if len(runs) < 2:
        return None

    def differs(a: int, b: int) -> Disagreement | None:
        for i, (name, lim) in enumerate(zip(names, limits)):
            c = compare_output(name, runs[a][i], runs[b][i], lim)
            if not c.ok:
                worst = worst_difference(runs[a][i], runs[b][i])
                return Disagreement(sample, a, name, worst, b, c.problems[0])
        return None

    against_first = [differs(r, 0) for r in range(1, len(runs))]
    odd = [d for d in against_first if d is not None]
    if not odd:
        return None
    if len(odd) * 2 <= len(runs) - 1:   # most runs agree with run 0: the first other one is odd
        return odd[0]
    # most runs disagree with run 0: run 0 is the odd one (named against the next run)
    found = differs(0, 1)
    return found if found is not None else odd[0]


def worst_difference(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b|: infinite where the shapes differ or a NaN/Inf sits in one only."""
    if a.shape != b.shape:
        return math.inf
    x, y = a.astype(np.float64), b.astype(np.float64)
    same = (x == y) | (np.isnan(x) & np.isnan(y))
    diff = np.where(same, 0.0, np.abs(x - y))
    return float(np.nan_to_num(diff, nan=math.inf).max()) if diff.size else 0.0


def escape_probability(p: float, calls: int) -> float:
    """The chance that a fault hitting each call independently with probability `p` hits none
    of `calls` calls."""
    return (1.0 - p) ** calls


def caught_at_least(k: int, deploys: int, p: float, calls: int) -> float:
    """The chance that at least `k` of `deploys` deploys (each `calls` calls) catch the fault."""
    q = 1.0 - escape_probability(p, calls)
    return sum(math.comb(deploys, j) * q ** j * (1 - q) ** (deploys - j)
               for j in range(k, deploys + 1))
