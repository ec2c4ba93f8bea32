"""`edgekit tune`: build, validate and time lowering × flag set × thread variants; record the
fastest valid one so that `build` and `deploy` use it."""

from __future__ import annotations

from collections.abc import Callable

from edgekit.tune.tuner import CandidateResult, TuneOptions, TuningRecord, paired_gain


def tune(options: TuneOptions, on_progress: Callable[[str], None] | None = None
         ) -> TuningRecord:
    from edgekit.tune.tuner import tune as run_tune
    return run_tune(options, on_progress=on_progress)


__all__ = ["CandidateResult", "TuneOptions", "TuningRecord", "paired_gain", "tune"]
