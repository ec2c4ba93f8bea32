"""edgekit: take a PyTorch model to edge devices and prove, on each, that it runs correctly.

Every CLI command is a Python function here::

    from edgekit import BuildOptions, build, validate_local
    result = build(BuildOptions(recipe=Path("recipes/kws_mlp.yaml"), target="host"))
    report = validate_local(result.bundle.path)
"""

from edgekit.config.recipe import Recipe, load_recipe
from edgekit.config.profiles import Target, available_targets, load_target
from edgekit.errors import EdgekitError
from edgekit.models.bundle import Bundle, load_bundle
from edgekit.api.build import BuildOptions, BuildResult, build
from edgekit.validate.local import validate_local

__all__ = [
    "Bundle", "BuildOptions", "BuildResult", "EdgekitError", "Recipe", "Target",
    "available_targets", "build", "load_bundle", "load_recipe", "load_target", "validate_local",
]
