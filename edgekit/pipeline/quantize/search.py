"""Mixed precision chosen by measured error: the pure rules of `edgekit quantize search`.

The layers (the modules holding a convolution, linear or matmul) are ranked by the error each
adds in the all-int8 model against the float model: its output's 1 - cosine (worst sample,
bisect's taps) minus that of the layer before it in execution order, so that a layer is not
blamed for the error it was fed. Candidate k keeps the k worst layers float; each candidate is
built, scored on the dataset and timed. The frontier is the candidates no other beats on both
score and latency; the choice is the fastest candidate whose drop is within `max_drop`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edgekit.config.recipe import LayerError
from edgekit.speed import DEFAULT_BAR


def rank_layers(errors: Sequence[LayerError]) -> tuple[LayerError, ...]:
    """`errors` in execution order, each given the error it adds (`added`), worst first (ties:
    the later layer first, nearer the outputs)."""
    ranked, before = [], 0.0
    for e in errors:
        lost = 1.0 - e.cosine if e.cosine is not None and math.isfinite(e.cosine) else None
        added = None if lost is None else lost - before
        ranked.append(e.model_copy(update={"added": added}))
        before = lost if lost is not None else before
    order = sorted(range(len(ranked)), key=lambda i: (
        -(ranked[i].added if ranked[i].added is not None else -math.inf), -i))
    return tuple(ranked[i] for i in order)


def float_counts(layers: int, max_float: int) -> list[int]:
    """k = 0, 1, 2, … layers kept float: never all of them (that is the fp32 build)."""
    return list(range(0, max(0, min(layers - 1, max_float)) + 1))


@dataclass(frozen=True)
class Measured:
    """One build of the search: its float layers, dataset score and drop, per-call p50."""

    name: str                       # "int8", "int8 + 2 float", "fp32"
    float_layers: tuple[str, ...]
    score: float
    drop: float
    p50_ms: float | None = None
    quantized: bool = True          # False: the fp32 build (shown, never chosen)

    def meets(self, max_drop: float) -> bool:
        return math.isfinite(self.drop) and self.drop <= max_drop


def enough(measured: Sequence[Measured], max_drop: float, beyond: int = 1) -> bool:
    """Stop building candidates: `beyond` more have been measured after the first that met
    the drop (more float layers only slow a build down, but one more shows the frontier)."""
    met = next((i for i, m in enumerate(measured) if m.meets(max_drop)), None)
    return met is not None and len(measured) - 1 - met >= beyond


def frontier(measured: Sequence[Measured]) -> list[Measured]:
    """The candidates not dominated: none other is at least as fast with at least as good a
    score (lower drop) and better at one. Without latencies: all of them."""
    timed = [m for m in measured if m.p50_ms is not None]
    if len(timed) < len(measured):
        return list(measured)

    def beats(a: Measured, b: Measured) -> bool:
        return (a.p50_ms <= b.p50_ms and a.drop <= b.drop
                and (a.p50_ms < b.p50_ms or a.drop < b.drop))
    return [m for m in measured if not any(beats(o, m) for o in measured if o is not m)]


def choose(measured: Sequence[Measured], max_drop: float, bar: float = DEFAULT_BAR
           ) -> Measured | None:
    """The fastest quantized candidate within `max_drop`; None when none is. p50s within
    `bar` of the fastest (speed.py's smallest change worth a verdict) are a tie, won by the
    fewest float layers, then the smaller drop; untimed candidates: the fewest float layers."""
    ok = [m for m in measured if m.quantized and m.meets(max_drop)]
    if not ok:
        return None
    if all(m.p50_ms is not None for m in ok):
        fastest = min(m.p50_ms for m in ok)
        ok = [m for m in ok if m.p50_ms <= fastest * (1 + bar)]
    return min(ok, key=lambda m: (len(m.float_layers), m.drop))
