"""Is B slower than A? The one rule edgekit answers it by: `edgekit tune` (is a candidate
clearly faster than the untuned build?), a fleet's latency gate (is the new release slower
than the one it replaces?) and `edgekit bench compare` (did the p50 move between releases?).

The answer is the ratio B/A of medians, with its noise band:
- paired rounds (round i of A and of B ran back to back: tune's candidates, the gate's two
  releases): the median of the per-round ratios. Pairing cancels the machine's slow spells,
  which on a shared VM make a whole round 1.5-2x slower (a standard-error test on such heavy
  tails kept the untuned build against a 22% faster variant). Noise: one standard error of that
  median, from the median absolute deviation of the per-round log-ratios (1.4826 × MAD /
  √rounds: robust to the one slow round). The rounds must also agree: two of three or more on
  the verdict's side.
- unpaired (two runs at different times: the bench history): the ratio of the runs' medians.
  Latency noise scales with the latency (a build five times slower wobbles five times as many
  milliseconds), so the noise is that of the log-ratio: each run's spread between its rounds
  relative to its own mean (Welch), 3.5 standard errors — there is no pairing to agree, hence
  the wider band. The spread that matters is between benchmark processes (on a shared or
  thermally managed machine several times that of calls within one process).
B is "slower" (or "faster") only beyond both the caller's bar (3%: what is worth a change; a
gate's allowed ratio) and the noise band; otherwise "within noise".

A leaf: numpy only, no edgekit import (tune, fleet and device all reach it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SLOWER, FASTER, WITHIN_NOISE = "slower", "faster", "within noise"
DEFAULT_BAR = 0.03                # a change smaller than 3% is not worth a verdict
MAD_TO_SD = 1.4826                # MAD → standard deviation, for normal data
PAIRED_SE = 1.0                   # standard errors of the paired band (the rounds agree too)
UNPAIRED_SE = 3.5                 # of the unpaired band (nothing else to agree)


@dataclass(frozen=True)
class PairedRounds:
    """Per-round figures (a median or a p90 per round) of run A (`base`) and run B (`new`).
    `paired`: round i of both ran back to back (then both have as many rounds). Unpaired runs
    may give `medians`, their own medians over all their calls, to compare instead of the
    median of their rounds."""

    base: tuple[float, ...]
    new: tuple[float, ...]
    paired: bool = True
    medians: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        figures = (*self.base, *self.new, *(self.medians or ()))
        if not self.base or not self.new or not all(math.isfinite(f) and f > 0
                                                    for f in figures):
            raise ValueError("paired rounds need positive, finite figures on both sides")
        if self.paired and len(self.base) != len(self.new):
            raise ValueError(f"paired rounds: {len(self.base)} against {len(self.new)}")


@dataclass(frozen=True)
class Verdict:
    call: str                     # slower | faster | within noise (B against A)
    ratio: float                  # B / A
    noise: float                  # the ratio's noise, as a fraction (0.05: ±5%)
    band: float                   # what the ratio had to leave: max(bar, noise)
    rounds: int                   # paired rounds (0: unpaired)
    slower_rounds: int = 0        # paired rounds in which B was slower
    faster_rounds: int = 0
    beyond_bar: int = 0           # paired rounds whose own ratio is beyond the bar, on the
                                  # side of the median's

    @property
    def change_pct(self) -> float:
        """B's change against A in %: +20 is 20% slower."""
        return 100 * (self.ratio - 1)


def verdict(rounds: PairedRounds, bar: float = DEFAULT_BAR) -> Verdict:
    """B (`rounds.new`) against A (`rounds.base`): slower, faster or within noise, with the
    ratio and its noise band (see the module's docstring). `bar`: the smallest change that
    counts (0.03: 3%; a gate's max ratio 1.25 is a bar of 0.25)."""
    base, new = np.asarray(rounds.base, float), np.asarray(rounds.new, float)
    if rounds.paired:
        ratios = new / base
        ratio = float(np.median(ratios))
        logs = np.log(ratios)
        mad = float(np.median(np.abs(logs - np.median(logs))))
        noise_log = PAIRED_SE * MAD_TO_SD * mad / math.sqrt(ratios.size)
    else:
        medians = rounds.medians or (float(np.median(base)), float(np.median(new)))
        ratio = medians[1] / medians[0]
        noise_log = UNPAIRED_SE * math.sqrt(_relative_variance(base) / base.size
                                            + _relative_variance(new) / new.size)
    band_log = max(math.log1p(bar), noise_log)
    change = math.log(ratio)
    slower = faster = beyond = 0
    agree = True
    if rounds.paired:
        slower, faster = int((new > base).sum()), int((new < base).sum())
        beyond = int((ratios > 1 + bar).sum() if ratio >= 1 else (ratios < 1 - bar).sum())
        agree = 3 * (slower if change > 0 else faster) >= 2 * ratios.size
    call = (SLOWER if change > band_log and agree else
            FASTER if change < -band_log and agree else WITHIN_NOISE)
    return Verdict(call=call, ratio=ratio, noise=math.expm1(noise_log),
                   band=math.expm1(band_log), rounds=int(base.size) if rounds.paired else 0,
                   slower_rounds=slower, faster_rounds=faster, beyond_bar=beyond)


def _relative_variance(figures: np.ndarray) -> float:
    """Squared coefficient of variation (the variance of the log, by the delta method); 0 for
    a single figure."""
    if figures.size < 2:
        return 0.0
    mean = float(figures.mean())
    return float(figures.var(ddof=1)) / mean ** 2
