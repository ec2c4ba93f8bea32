"""A cache hit found from the model's sources (pipeline/source_key.py): no torch import on a hit,
and a miss whenever anything the model is made from changed. Real CLI builds in fresh
processes, as users run them (an in-process re-import would not see a changed module)."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.integration.helpers import edgekit

MODEL = '''
import numpy as np
import torch
from pathlib import Path

from tinypkg.helper import SCALE


class Scaled(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(weight) * SCALE)
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(x)


def factory():
    weight = np.load(Path(__file__).with_name("weights.npy"))
    return Scaled(weight).eval(), (torch.ones(1, 4),)


def unseeded():
    return torch.nn.Linear(4, 3).eval(), (torch.ones(1, 4),)
'''
RECIPE = """
name: srckey
model:
  python: tinypkg.model:{factory}
validation:
  atol: {atol}
"""


@pytest.fixture
def project(tmp_path):
    pkg = tmp_path / "tinypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(textwrap.dedent(MODEL))
    (pkg / "helper.py").write_text("SCALE = 1.0\n")
    np.save(pkg / "weights.npy", np.arange(12, dtype=np.float32).reshape(3, 4) / 10)
    return tmp_path


def _build(project, factory="factory", atol="1.0e-4", *extra):
    recipe = project / "recipe.yaml"
    recipe.write_text(RECIPE.format(factory=factory, atol=atol))
    env = {"PYTHONPATH": os.pathsep.join([str(project), os.environ.get("PYTHONPATH", "")])}
    done = edgekit("build", "--recipe", str(recipe), "--target", "host", "--json", *extra,
                   cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _from_sources(result) -> bool:
    return "source key" in result["stage_seconds"]


def test_a_second_build_is_answered_from_the_sources_without_the_toolchain(project):
    first = _build(project)
    assert not first["cached"] and "determinism check" in first["stage_seconds"]
    second = _build(project)
    assert second["cached"] and _from_sources(second)
    assert second["manifest"]["build_key"] == first["manifest"]["build_key"]
    # the hit imports neither torch nor a compiler: one process, asked directly
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project),
                                                        os.environ.get("PYTHONPATH", "")])}
    probe = ("import sys; from pathlib import Path; from edgekit import BuildOptions, build; "
             f"r = build(BuildOptions(recipe=Path({str(project / 'recipe.yaml')!r}), "
             "target='host')); "
             "print(r.cached, 'torch' in sys.modules, 'iree.compiler' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=project, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "False", "False"], out.stderr


def test_a_changed_helper_module_weights_file_or_recipe_value_each_misses(project):
    keys = [_build(project)["manifest"]["build_key"]]
    (project / "tinypkg" / "helper.py").write_text("SCALE = 2.0\n")   # imported by the factory
    changed = _build(project)
    assert not _from_sources(changed)
    keys.append(changed["manifest"]["build_key"])
    weights = project / "tinypkg" / "weights.npy"                    # read by the factory
    np.save(weights, np.load(weights) + 1.0)
    changed = _build(project)
    assert not _from_sources(changed)
    keys.append(changed["manifest"]["build_key"])
    changed = _build(project, "factory", "2.0e-4")                   # a recipe value
    assert not changed["cached"] and not _from_sources(changed)
    keys.append(changed["manifest"]["build_key"])
    assert len(set(keys)) == 4


def test_an_unseeded_model_is_never_answered_from_its_sources(project):
    _build(project, "unseeded")
    again = _build(project, "unseeded")
    assert not _from_sources(again) and not again["cached"]
