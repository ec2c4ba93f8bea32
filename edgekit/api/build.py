"""`edgekit build` as users mean it: the pipeline's build, steered by what earlier `edgekit
tune` and `edgekit check` runs learned about the model on the target."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from edgekit.config.profiles import Target
# torch-free imports only: a hit found from the model's sources (pipeline/source_key.py) never
# imports torch; the pipeline, the tuner and check load when a build needs them
from edgekit.pipeline.build_types import BuildOptions, BuildResult, Steering
# an NPU build's summary lines, as its family tells them, for the CLI's renderer
from edgekit.pipeline.npu.registry import summary as npu_summary
from edgekit.pipeline.source_key import hit_from_sources
# the int8 outputs whose tolerance the reference's own spread widened, for the renderer
from edgekit.validate.tolerance import spread_limits


def recorded_steering(digest: str, target: Target) -> Steering:
    """The tuning record and check verdict kept in $EDGEKIT_HOME for this model and target."""
    from edgekit.pipeline.check import learned_lowering, verdict_path
    from edgekit.tune.tuner import record_path, tuned_choice
    return Steering(tuning=tuned_choice(digest, target),
                    first_lowering=learned_lowering(digest, target),
                    read_from=(record_path(digest, target), verdict_path(digest, target)))


recorded_steering.declares_reads = True   # its `read_from` is complete (source_key.py)


def build(options: BuildOptions, on_stage: Callable[[str], None] | None = None) -> BuildResult:
    """Build (or fetch from the cache) the bundle for a recipe and target profile, applying
    the recorded tuning choice (unless `use_tuned` is off) and check verdict."""
    if options.steer is None:
        options = dataclasses.replace(options, steer=recorded_steering)
    # `quantize.max_drop`: the layers kept float are searched first (an input of the build)
    from edgekit.api.quantize import searched_options
    options = searched_options(options, on_stage or (lambda _: None))
    hit = hit_from_sources(options)
    if hit is not None:
        return hit
    from edgekit.pipeline import build as pipeline
    return pipeline.build(options, on_stage)


__all__ = ["BuildOptions", "BuildResult", "build", "npu_summary", "recorded_steering",
           "spread_limits"]
