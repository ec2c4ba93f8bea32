"""`edgekit demo`: the main job end to end on an embedded default — build an example recipe for
the host and prove the module on this machine against PyTorch's outputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.models.report import ValidationReport
from edgekit.pipeline.build import BuildOptions, BuildResult, build
from edgekit.validate.local import validate_local

EXAMPLE_RECIPES = Path(__file__).resolve().parents[1] / "recipes"
DEFAULT_RECIPE = EXAMPLE_RECIPES / "mobilenet_v2.yaml"


@dataclass(frozen=True)
class DemoResult:
    build: BuildResult
    report: ValidationReport


def run_demo(recipe: Path = DEFAULT_RECIPE, target: str = "host",
             on_stage: Callable[[str], None] | None = None) -> DemoResult:
    built = build(BuildOptions(recipe=recipe, target=target), on_stage=on_stage)
    if on_stage:
        on_stage("validate")
    return DemoResult(build=built, report=validate_local(built.bundle.path))
