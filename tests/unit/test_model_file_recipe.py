"""`edgekit build MODEL.onnx|MODEL.pt2`: the recipe edgekit writes for a model file, and the
mistakes around it (no compiler here: each answer comes before a build)."""

import pytest

from edgekit.api.model_file import app_name, recipe_for_model
from edgekit.errors import ConfigError
from tests.fixtures.cli import edgekit_here

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("file, name", [("tiny mlp.onnx", "tiny-mlp"), ("ResNet50.pt2", "ResNet50"),
                                        ("_x.onnx", "x"), ("---.onnx", "model")])
def test_the_app_is_named_after_the_file(file, name, tmp_path):
    assert app_name(tmp_path / file) == name


def test_the_recipe_is_written_beside_the_bundles_once_and_never_over_another(tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.onnx").write_bytes(b"x")
    first = recipe_for_model(tmp_path / "m.onnx")
    assert first.written and first.path == tmp_path.joinpath("build", "m.recipe.yaml").relative_to(
        tmp_path)
    assert "onnx: ../m.onnx" in first.path.read_text()
    first.path.write_text(first.path.read_text() + "quantize: {mode: fp16}\n")   # the user's edit
    again = recipe_for_model(tmp_path / "m.onnx")
    assert not again.written and "fp16" in again.path.read_text()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "m.onnx").write_bytes(b"y")
    with pytest.raises(ConfigError, match="names another model") as refused:
        recipe_for_model(tmp_path / "other" / "m.onnx")
    assert "--recipe build/m.recipe.yaml" in refused.value.hint
    assert "fp16" in first.path.read_text()


def test_model_file_mistakes_answer_in_one_line(tmp_path):
    (tmp_path / "model.py").write_text("")
    for args, said in [(["model.py"], "ending in .onnx or .pt2"),
                       (["missing.onnx"], "no such model file"),
                       ([], "give a model file"),
                       (["m.onnx", "--recipe", "r.yaml"], "give a model file")]:
        proc = edgekit_here("build", *args, "--target", "host", cwd=tmp_path)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
