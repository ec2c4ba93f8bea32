"""What `edgekit build` is asked and answers: options, steering, result (torch-free, so that
a cache hit can be answered without importing the toolchain: pipeline/source_key.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.models.bundle import Bundle, TuningNote


@dataclass(frozen=True)
class Variant:
    """A lowering + named flag set: what `edgekit tune` compares and chooses."""

    lowering: str
    flag_set: str
    flags: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.lowering}/{self.flag_set}"

    def applied_to(self, recipe: Recipe) -> Recipe:
        """The recipe with this lowering, and this set's flags before the recipe's own."""
        compile_options = recipe.compile.model_copy(
            update={"flags": (*self.flags, *recipe.compile.flags)})
        # model_copy keeps the private `_path`, so relative paths still resolve
        return recipe.model_copy(update={"lowering": self.lowering, "compile": compile_options})


@dataclass(frozen=True)
class Steering:
    """What earlier runs learned about this model on this target: `edgekit tune`'s choice and
    the lowering `edgekit check` found to build. An explicit input of the build: it enters the
    cache key (through the variant's flags and the lowering order) and the manifest."""

    tuning: TuningNote | None = None
    first_lowering: tuple[str, str] | None = None   # (lowering, why) tried first by `auto`
    # the files this steering was read from (absent ones too): a cache hit keyed on the model's
    # sources (source_key.py) re-checks them instead of asking again; None: not known, so no
    # such hit is ever answered for a build steered by it
    read_from: tuple[Path, ...] | None = None


# (model digest, target) → what steers the build; the application layer supplies it, reading
# the tuning records and check verdicts (the pipeline itself reads no side files).
Steer = Callable[[str, Target], Steering]


@dataclass(frozen=True)
class BuildOptions:
    recipe: Path
    target: str
    out: Path | None = None         # default: build/<app>-<target>
    use_cache: bool = True
    tar: bool = False               # also write <out>.tar
    use_tuned: bool = True          # apply the steering's tuning choice (if `steer` is given)
    variant: Variant | None = None  # build this lowering + flag set instead (tune's candidates)
    steer: Steer | None = None      # what earlier tune/check runs learned (see Steering)
    quantize: str | None = None     # "none" or a mode: overrides the recipe's `quantize:` mode
    private: bool = False           # the bundle goes to a new temporary directory, not `out`
                                    # (deploy: its own copy); the caller removes its parent
    trust_pickle: bool = False      # load the recipe's .pt2 (`--trust-pickle`): it is unpickled
    # the recipe as loaded from `recipe` and edited (`edgekit quantize search`'s candidates and
    # choice: `quantize.keep_float`); its relative paths still resolve against `recipe`
    recipe_override: Recipe | None = None


@dataclass(frozen=True)
class BuildResult:
    bundle: Bundle
    cached: bool
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    tar: Path | None = None


def default_out(recipe: Recipe, target: Target) -> Path:
    return Path("build") / f"{recipe.name}-{target.name}"
