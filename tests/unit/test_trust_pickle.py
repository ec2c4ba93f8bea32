"""A .pt2 is a pickle (torch.export.load unpickles weights with weights_only=False): edgekit
loads one only when the user says they trust it (issue 17, item 6)."""

import io
import json
import os
import zipfile

import pytest
import torch

from edgekit.config.recipe import load_recipe
from edgekit.errors import ModelLoadError
from edgekit.pipeline.frontends.torch import TorchFrontend
from tests.fixtures.cli import edgekit_here


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def evil_pt2(path, marker) -> None:
    """A real exported program whose first weight, once unpickled, runs `touch marker`."""
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, \
            zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("model_weights_config.json"):
                config = json.loads(data)
                config["config"]["weight"]["use_pickle"] = True
                data = json.dumps(config).encode()
            elif item.filename.endswith("weights/" + "weight_0"):
                data = __import__("pickle").dumps(_RunsCode(marker))
            dst.writestr(item, data)




@pytest.fixture
def evil(tmp_path):
    evil_pt2(tmp_path / "model.pt2", tmp_path / "pwned")
    (tmp_path / "recipe.yaml").write_text("name: evil\nmodel:\n  exported: model.pt2\n")
    return tmp_path


@pytest.mark.parametrize("argv", [["build", "--recipe", "recipe.yaml", "--target", "host"],
                                  ["check", "model.pt2"], ["check", "recipe.yaml"]],
                         ids=" ".join)
def test_an_untrusted_pt2_is_refused_in_one_line_before_it_is_unpickled(evil, argv):
    proc = edgekit_here(*argv, cwd=evil)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: ") and "refusing to load model.pt2" in lines[0]
    assert lines[1:] == ["  hint: if you made this file or trust its source, add "
                         "`trust_pickle: true` under `model:` or pass --trust-pickle"]
    assert not (evil / "pwned").exists()


def test_the_recipe_key_or_the_flag_lets_a_trusted_pt2_load(evil):
    # the evil file proves the load really happens once trusted (and what trusting means)
    recipe = load_recipe(evil / "recipe.yaml")
    with pytest.raises(ModelLoadError):
        TorchFrontend().load(recipe.trusting_pickle())
    assert (evil / "pwned").exists()
    (evil / "pwned").unlink()
    (evil / "trusted.yaml").write_text("name: evil\nmodel:\n  exported: model.pt2\n"
                                       "  trust_pickle: true\n")
    with pytest.raises(ModelLoadError):
        TorchFrontend().load(load_recipe(evil / "trusted.yaml"))
    assert (evil / "pwned").exists()


def test_trust_pickle_does_not_change_what_a_build_makes(evil):
    recipe = load_recipe(evil / "recipe.yaml")
    assert recipe.trusting_pickle().model_dump() == recipe.model_dump()
