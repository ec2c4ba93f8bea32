"""The contexts of `edgekit build`'s stages: `BackContext` (what the CPU BACK stages read:
`edgekit build`, torch.compile graphs and bisect variants alike) and `BuildRun` (one build's
whole plan: its inputs and what earlier stages learned, read by later ones and by an NPU
family's stages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.models.bundle import QuantizationNote, TuningNote
from edgekit.pipeline.build_types import BuildOptions, Steering
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.stages import PlanError

if TYPE_CHECKING:     # package imports torch; a family's module imports this one
    from edgekit.pipeline.package import BundleIdentity
    from edgekit.pipeline.source_key import Recording


@dataclass(frozen=True)
class BackContext:
    """What the BACK stages read besides the model: from a recipe (`edgekit build`) or from a
    torch.compile graph's settings (compile/backend.py)."""

    target: Target
    lowering: str                   # "auto" or one lowering
    flags: tuple[str, ...]          # after the profile's (edgekit's own `--edgekit-…` too)
    identity: Callable[[QuantizationNote | None], BundleIdentity]  # names the bundle
    workdir: Path
    bundle_dir: Path
    reproducer_dir: Path
    first_lowering: tuple[str, str] | None = None


@dataclass(frozen=True)
class Stored:
    """The end of a build's plan: the bundle's cache entry, and whether the cache had it."""

    entry: Path
    cached: bool


@dataclass
class BuildRun:
    """One `edgekit build`: its inputs, then what its stages learn (each field below the line
    is set by the stage its comment names and read by later ones)."""

    options: BuildOptions
    recipe: Recipe                       # the FRONT stages' (`quantize` override applied)
    target: Target
    workdir: Path
    out: Path
    npu_versions: dict[str, dict[str, str]]   # the NPU family's toolchains ({}: none)
    recording: Recording                      # the files FRONT and the steering read
    # ---
    float_model: ExportedModel | None = None  # "export": the model before quantization
    steering: Steering | None = None          # "build key"
    tuning: TuningNote | None = None          # "build key": the tuned variant applied
    key: str = ""                             # "build key"
    built: ExportedModel | None = None        # "build key": the model BACK compiles
    back: BackContext | None = None           # "build key"
    sources_read: set[str] = field(default_factory=set)   # "build key": FRONT + steering

    def back_context(self) -> BackContext:
        if self.back is None:                 # a stage placed before "build key"
            raise PlanError("the BACK stages' context is set by the 'build key' stage")
        return self.back
