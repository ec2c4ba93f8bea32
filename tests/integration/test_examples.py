"""The example recipes work as they are: each builds for the host and validates there."""

from pathlib import Path

import numpy as np
import pytest

from edgekit import BuildOptions, build, validate_local
from edgekit.errors import ModelLoadError

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")
                                          if p.name != "resnet18.yaml"))
def test_an_example_recipe_builds_and_validates_on_the_host(recipe):
    result = build(BuildOptions(recipe=RECIPES / recipe, target="host"))
    report = validate_local(result.bundle.path)
    assert report.ok, report
    golden = np.load(result.bundle.file("golden/output_0.npy"))
    assert golden.std() > 1e-3  # a real signal, not a constant (e.g. vanished activations)


def test_samples_that_do_not_match_the_declared_inputs_are_refused(write_recipe, tmp_path):
    np.savez(tmp_path / "s.npz", features=np.zeros((2, 15), np.float32))
    recipe = write_recipe("""
        model:
          python: "@TINY@:mlp"
        inputs:
          - name: features
            shape: [2, 16]
        samples: s.npz
    """)
    with pytest.raises(ModelLoadError, match=r"float32\[2, 15\] but the recipe declares"):
        build(BuildOptions(recipe=recipe, target="host"))


def test_a_factory_that_raises_is_a_load_error_not_a_crash(write_recipe, tmp_path):
    (tmp_path / "broken.py").write_text("def make():\n    raise ValueError('no weights')\n")
    recipe = write_recipe("model:\n  python: broken.py:make\n")
    with pytest.raises(ModelLoadError, match="raised ValueError: no weights"):
        build(BuildOptions(recipe=recipe, target="host"))
