"""ONNX sources (made here from in-tree models and by hand) and `edgekit check`."""

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from edgekit import BuildOptions, build, validate_local
from edgekit.errors import LoweringError, ModelLoadError
from edgekit.examples.models import kws_mlp
from tests.fixtures.cli import edgekit_here


def export_onnx(model, example, path, names=("x",)):
    torch.onnx.export(model, example, str(path), dynamo=False, input_names=list(names),
                      opset_version=17)
    return path


def acos_graph(path):
    """A hand-built graph whose Acos has no TOSA lowering (Linalg has one)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Acos", ["t"], ["a"]),
             helper.make_node("Mul", ["a", "t"], ["y"])]
    # the graph is named after the file: distinct models, so one test's `check` (remembered
    # per model) does not steer another test's build
    model = helper.make_model(helper.make_graph(nodes, path.stem, [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def test_an_onnx_recipe_builds_and_validates_against_onnxruntime(write_recipe, tmp_path):
    model, example = kws_mlp()
    export_onnx(model, example, tmp_path / "kws.onnx", names=("mfcc",))
    bundle = build(BuildOptions(recipe=write_recipe("name: kws-onnx\nmodel:\n  onnx: kws.onnx\n"),
                                target="host")).bundle
    assert bundle.manifest.inputs[0].name == "mfcc" and bundle.manifest.model_source == "kws.onnx"
    with torch.no_grad():  # the golden outputs are onnxruntime's, equal to PyTorch's here
        expected = model(torch.from_numpy(np.load(bundle.file("golden/input_0.npy"))))
    np.testing.assert_allclose(np.load(bundle.file("golden/output_0.npy")), expected.numpy(),
                               atol=1e-5)
    assert validate_local(bundle.path).ok


def test_a_float_onnx_cnn_takes_tosa_first_and_says_so(write_recipe, tmp_path):
    """tosa's convolutions are NHWC; IREE's ONNX input keeps ONNX's NCHW ones, ~3× slower
    (frontends/onnx.py: TOSA_FIRST_OPS)."""
    from edgekit.examples.models import conv_mean
    model, example = conv_mean()
    export_onnx(model, example, tmp_path / "cm.onnx", names=("x",))
    bundle = build(BuildOptions(recipe=write_recipe("name: cm\nmodel:\n  onnx: cm.onnx\n"),
                                target="host")).bundle
    lowering = bundle.manifest.lowering
    assert lowering.used == "tosa" and [a.lowering for a in lowering.attempts] == ["tosa"]
    assert "tosa (NHWC convolutions) tried first" in lowering.note
    assert validate_local(bundle.path).ok


def test_an_onnx_model_takes_irees_onnx_input_first_and_says_so(write_recipe, tmp_path):
    acos_graph(tmp_path / "acos.onnx")   # Acos: tosa cannot take it, IREE's ONNX input can
    result = build(BuildOptions(recipe=write_recipe("name: acos\nmodel:\n  onnx: acos.onnx\n"),
                                target="host"))
    lowering = result.bundle.manifest.lowering
    assert lowering.used == "torch" and [a.lowering for a in lowering.attempts] == ["torch"]
    assert "IREE's own ONNX input tried first" in lowering.note
    assert validate_local(result.bundle.path).ok
    # tosa, asked for, fails on the op and says which
    tosa = write_recipe("name: acos\nmodel:\n  onnx: acos.onnx\nlowering: tosa\n", "t.yaml")
    with pytest.raises(LoweringError, match="torch.aten.acos"):
        build(BuildOptions(recipe=tosa, target="host"))


def test_check_of_an_onnx_model_takes_it_whole_through_irees_onnx_input(tmp_path):
    acos_graph(tmp_path / "acos.onnx")
    proc = edgekit_here("check", str(tmp_path / "acos.onnx"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    by_op = {o["op"]: o for o in report["ops"]}
    assert set(by_op) == {"Tanh", "Acos", "Mul"}
    # IREE's ONNX input goes first for ONNX models (as a build takes it) and takes the whole
    # model: every op is known to work through it, none is cut out and checked on its own
    assert report["chosen"] == "torch" and report["buildable"]
    assert report["whole_model"].get("torch") is True, report["whole_model"]
    assert all(o["tosa"] is None and o["compiled"] for o in by_op.values()), by_op


def test_check_reports_aten_ops_of_a_pytorch_model(tmp_path):
    proc = edgekit_here("check", f"{tmp_path.parent.parent}/x.py:y", cwd=tmp_path)  # missing module
    assert proc.returncode == 3
    from tests.conftest import TINY
    # its own cache: what check learns about this shared fixture must not steer other tests
    proc = edgekit_here("check", f"{TINY}:atan2_model", "--json", cwd=tmp_path,
                        env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    ops = {o["op"]: o for o in json.loads(proc.stdout)["ops"]}
    assert ops["aten::atan2"]["tosa"] is False and ops["aten::atan2"]["linalg"] is True
    assert all(o["tosa"] is not False and o["linalg"] and o["compiled"]
               for name, o in ops.items() if name != "aten::atan2")
    assert not any(name.startswith(("getitem", "operator")) for name in ops)


def test_external_data_outside_the_model_directory_is_refused(write_recipe, tmp_path):
    model, example = kws_mlp()
    models = tmp_path / "models"
    models.mkdir()
    export_onnx(model, example, models / "kws.onnx")
    proto = onnx.load(str(models / "kws.onnx"))
    onnx.save(proto, str(models / "kws.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert (models / "weights.bin").is_file()
    ok = build(BuildOptions(recipe=write_recipe("name: ext\nmodel:\n  onnx: models/kws.onnx\n"),
                            target="host"))
    assert validate_local(ok.bundle.path).ok  # beside the model: fine
    proto = onnx.load(str(models / "kws.onnx"), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../../etc/passwd"
    onnx.save(proto, str(models / "evil.onnx"))
    with pytest.raises(ModelLoadError, match="outside the model's directory"):
        build(BuildOptions(recipe=write_recipe("name: evil\nmodel:\n  onnx: models/evil.onnx\n"),
                           target="host"))


def test_dynamic_onnx_inputs_must_be_declared(write_recipe, tmp_path):
    model, example = kws_mlp()
    torch.onnx.export(model, example, str(tmp_path / "dyn.onnx"), dynamo=False,
                      input_names=["mfcc"], dynamic_axes={"mfcc": {0: "batch"}})
    with pytest.raises(ModelLoadError, match="'mfcc': batch"):
        build(BuildOptions(recipe=write_recipe("name: dyn\nmodel:\n  onnx: dyn.onnx\n"),
                           target="host"))
    declared = write_recipe("name: dyn\nmodel:\n  onnx: dyn.onnx\ninputs:\n"
                            "  - name: mfcc\n    shape: [3, 49, 10]\n", name="declared.yaml")
    assert validate_local(build(BuildOptions(recipe=declared, target="host")).bundle.path).ok


def test_auto_lowering_starts_with_what_check_learned(write_recipe, tmp_path):
    acos_graph(tmp_path / "learned.onnx")
    recipe = write_recipe("name: learned\nmodel:\n  onnx: learned.onnx\n")
    before = build(BuildOptions(recipe=recipe, target="host")).bundle.manifest.lowering
    assert [a.lowering for a in before.attempts] == ["torch"]   # IREE's ONNX input first
    assert edgekit_here("check", str(tmp_path / "learned.onnx"), cwd=tmp_path).returncode == 0
    # the verdict is an input of the build: the cached build made without it is not reused
    after = build(BuildOptions(recipe=recipe, target="host"))
    assert not after.cached
    lowering = after.bundle.manifest.lowering
    assert lowering.used == "torch" and [a.lowering for a in lowering.attempts] == ["torch"]
    assert "edgekit check chose torch" in lowering.note
