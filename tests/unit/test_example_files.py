"""The files README's examples use are in the repository (and so in the package), as README
prints them: the mali bisect example's target profile and recipe."""

from pathlib import Path

from edgekit.config.profiles import BUILTIN_TARGETS_DIR, load_target
from edgekit.config.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]


def test_the_mali_example_profile_is_valhall_spirv_without_the_device_check():
    profile = load_target("mali-unchecked")
    assert Path(profile.source).resolve() == (REPO / "targets" / "mali-unchecked.yaml").resolve()
    assert (BUILTIN_TARGETS_DIR / "mali-unchecked.yaml").is_file()       # in the wheel too
    assert profile.backend == "vulkan-spirv" and profile.vulkan.target == "valhall"
    assert profile.vulkan.device_match == ()           # what lets it reach llvmpipe
    assert load_target("rk3588-gpu").vulkan.device_match == ("Mali",)


def test_the_mali_example_recipe_is_the_conv_mean_model_from_the_packaged_examples():
    from edgekit.examples.models import conv_mean
    recipe = load_recipe(REPO / "recipes" / "conv_mean.yaml")
    assert recipe.name == "conv-mean"
    assert recipe.model.python == "edgekit.examples.models:conv_mean"
    model, (sample,) = conv_mean()
    assert tuple(model(sample).shape) == (1, 8)
