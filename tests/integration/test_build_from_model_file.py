"""`edgekit build model.onnx --target host` as `tvmc compile model.onnx` is used: no recipe;
the one edgekit writes is beside the bundle, builds the same bundle again from the cache, and
validates."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fixtures.cli import edgekit_here

pytestmark = pytest.mark.integration


def tiny_onnx(path):
    w = numpy_helper.from_array(np.random.RandomState(0).randn(8, 4).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=9), path)


def test_an_onnx_file_builds_without_a_recipe_and_its_recipe_is_kept(tmp_path):
    tiny_onnx(tmp_path / "tiny mlp.onnx")
    first = edgekit_here("build", "tiny mlp.onnx", "--target", "host", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    answer = json.loads(first.stdout)
    assert answer["recipe"] == "build/tiny-mlp.recipe.yaml"
    assert answer["bundle"].endswith("build/tiny-mlp-host") and not answer["cached"]
    again = edgekit_here("build", "tiny mlp.onnx", "--target", "host", cwd=tmp_path)
    assert again.returncode == 0 and "written earlier, used as it is" in again.stderr
    by_recipe = edgekit_here("build", "--recipe", "build/tiny-mlp.recipe.yaml", "--target",
                             "host", "--json", cwd=tmp_path)
    assert json.loads(by_recipe.stdout)["cached"]
    checked = edgekit_here("validate", "build/tiny-mlp-host", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
