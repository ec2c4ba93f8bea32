"""`edgekit build` as users mean it: the pipeline's build, steered by what earlier `edgekit
tune` and `edgekit check` runs learned about the model on the target."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from edgekit.config.profiles import Target
from edgekit.pipeline import build as pipeline
from edgekit.pipeline.build import BuildOptions, BuildResult, Steering
from edgekit.pipeline.check import learned_lowering
from edgekit.tune.tuner import tuned_choice


def recorded_steering(digest: str, target: Target) -> Steering:
    """The tuning record and check verdict kept in $EDGEKIT_HOME for this model and target."""
    return Steering(tuning=tuned_choice(digest, target),
                    first_lowering=learned_lowering(digest, target))


def build(options: BuildOptions, on_stage: Callable[[str], None] | None = None) -> BuildResult:
    """Build (or fetch from the cache) the bundle for a recipe and target profile, applying
    the recorded tuning choice (unless `use_tuned` is off) and check verdict."""
    if options.steer is None:
        options = dataclasses.replace(options, steer=recorded_steering)
    return pipeline.build(options, on_stage)


__all__ = ["BuildOptions", "BuildResult", "build", "recorded_steering"]
