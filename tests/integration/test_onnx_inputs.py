"""ONNX models as they come: every tensor type, a reference that always exists, random samples
that fit the graph, old opsets, graph names that are no identifiers (real onnx, onnxruntime,
torch-mlir and IREE on graphs made with onnx.helper)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from edgekit import BuildOptions, build, validate_local
from edgekit.errors import ModelLoadError
from tests.fixtures.cli import edgekit_here


def save(path, nodes, inputs, outputs, opset=17, ir_version=10, initializers=()):
    # the graph is named after the file: distinct models, distinct cache entries
    model = helper.make_model(helper.make_graph(nodes, path.stem, inputs, outputs,
                                                initializer=list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ir_version)
    onnx.save(model, str(path))
    return path


def one_error(proc) -> str:
    """The error line of a failed CLI run, checking it is one line (and its hint), no
    traceback."""
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr and lines[0].startswith("error: "), proc.stderr
    assert len(lines) == 1 or len(lines) == 2 and lines[1].startswith("  hint: "), proc.stderr
    return proc.stderr


def host_build(write_recipe, tmp_path, name, extra=""):
    recipe = write_recipe(f"name: {name}\nmodel:\n  onnx: {name}.onnx\n{extra}")
    return build(BuildOptions(recipe=recipe, target="host")).bundle


@pytest.mark.parametrize("elem, dtype", [(T.UINT16, "uint16"), (T.INT16, "int16"),
                                         (T.UINT64, "uint64"), (T.BFLOAT16, "bfloat16"),
                                         (T.FLOAT8E4M3FN, "float8_e4m3fn")])
def test_inputs_of_every_numeric_type_build_and_validate(write_recipe, tmp_path, elem, dtype):
    name = f"cast-{dtype.replace('_', '-')}"
    save(tmp_path / f"{name}.onnx",
         [helper.make_node("Cast", ["x"], ["c"], to=T.FLOAT),
          helper.make_node("Mul", ["c", "c"], ["y"])],
         [helper.make_tensor_value_info("x", elem, [2, 3])],
         [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])], opset=21)
    bundle = host_build(write_recipe, tmp_path, name)
    assert bundle.manifest.inputs[0].dtype == dtype
    report = validate_local(bundle.path)
    assert report.ok, report


# (torch-mlir's importer takes no Cast to float8: the float8 case passes its input through)
@pytest.mark.parametrize("elem, dtype, op", [(T.BFLOAT16, "bfloat16", "Cast"),
                                             (T.FLOAT8E4M3FN, "float8_e4m3fn", "Identity")])
def test_outputs_the_runtime_writes_raw_validate(write_recipe, tmp_path, elem, dtype, op):
    name = f"out-{dtype.replace('_', '-')}"
    save(tmp_path / f"{name}.onnx",
         [helper.make_node(op, ["x"], ["y"], **({"to": elem} if op == "Cast" else {}))],
         [helper.make_tensor_value_info("x", T.FLOAT if op == "Cast" else elem, [2, 3])],
         [helper.make_tensor_value_info("y", elem, [2, 3])], opset=21)
    bundle = host_build(write_recipe, tmp_path, name)
    assert bundle.manifest.outputs[0].dtype == dtype
    report = validate_local(bundle.path)
    assert report.ok and report.outputs[0].max_abs_error == 0, report


def test_float64_is_computed_in_float32_and_says_so(write_recipe, tmp_path):
    save(tmp_path / "f64.onnx", [helper.make_node("Mul", ["x", "x"], ["y"])],
         [helper.make_tensor_value_info("x", T.DOUBLE, [4])],
         [helper.make_tensor_value_info("y", T.DOUBLE, [4])])
    bundle = host_build(write_recipe, tmp_path, "f64")
    assert bundle.manifest.inputs[0].dtype == "float32"
    assert any("float64" in n for n in bundle.manifest.model_notes)
    assert validate_local(bundle.path).ok


def test_a_4_bit_input_is_refused_in_one_line_naming_it(write_recipe, tmp_path):
    save(tmp_path / "i4.onnx", [helper.make_node("Cast", ["w"], ["y"], to=T.FLOAT)],
         [helper.make_tensor_value_info("w", T.INT4, [4])],
         [helper.make_tensor_value_info("y", T.FLOAT, [4])], opset=21)
    proc = edgekit_here("build", "--recipe", str(write_recipe("model: {onnx: i4.onnx}\n")),
                        "--target", "host", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "input 'w' is of type int4" in one_error(proc)


def test_a_sequence_input_is_refused_in_one_line(write_recipe, tmp_path):
    seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, [2])
    save(tmp_path / "seq.onnx", [helper.make_node("SequenceAt", ["s", "i"], ["y"])],
         [seq, helper.make_tensor_value_info("i", T.INT64, [])],
         [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    with pytest.raises(ModelLoadError, match="input 's' is a sequence"):
        host_build(write_recipe, tmp_path, "seq")


def test_gather_indices_are_drawn_within_the_indexed_dimension(write_recipe, tmp_path):
    save(tmp_path / "gather.onnx",
         [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
         [helper.make_tensor_value_info("table", T.FLOAT, [5, 3]),
          helper.make_tensor_value_info("ids", T.INT64, [2, 4])],
         [helper.make_tensor_value_info("y", T.FLOAT, [2, 4, 3])])
    bundle = host_build(write_recipe, tmp_path, "gather")
    ids = np.load(bundle.file("golden/input_1.npy"))
    assert ids.min() >= 0 and ids.max() < 5 and len(np.unique(ids)) > 1
    assert bundle.manifest.golden_reference.startswith("onnxruntime ")
    assert validate_local(bundle.path).ok


def test_a_shape_input_needs_samples_and_builds_with_them(write_recipe, tmp_path):
    save(tmp_path / "reshape.onnx", [helper.make_node("Reshape", ["x", "shape"], ["y"])],
         [helper.make_tensor_value_info("x", T.FLOAT, [2, 6]),
          helper.make_tensor_value_info("shape", T.INT64, [2])],
         [helper.make_tensor_value_info("y", T.FLOAT, [3, 4])])
    proc = edgekit_here("build", "--recipe", str(write_recipe("model: {onnx: reshape.onnx}\n")),
                        "--target", "host", cwd=tmp_path)
    assert proc.returncode == 3
    assert "input 'shape' sets a shape or size of Reshape" in one_error(proc)
    assert "samples:" in proc.stderr
    # `samples:` without `inputs:`, as the model names them
    np.savez(tmp_path / "s.npz", x=np.arange(12, dtype=np.float32).reshape(2, 6),
             shape=np.array([3, 4], dtype=np.int64))
    bundle = host_build(write_recipe, tmp_path, "reshape", "samples: s.npz\n")
    assert list(bundle.manifest.outputs[0].shape) == [3, 4]
    assert validate_local(bundle.path).ok


def test_zero_d_samples_keep_their_shape(write_recipe, tmp_path):
    save(tmp_path / "scalar.onnx", [helper.make_node("Mul", ["x", "k"], ["y"])],
         [helper.make_tensor_value_info("x", T.FLOAT, [3]),
          helper.make_tensor_value_info("k", T.FLOAT, [])],
         [helper.make_tensor_value_info("y", T.FLOAT, [3])])
    np.savez(tmp_path / "s.npz", x=np.arange(1, 4, dtype=np.float32), k=np.float32(2.5))
    bundle = host_build(write_recipe, tmp_path, "scalar", "samples: s.npz\n")
    assert np.load(bundle.file("golden/input_1.npy")).shape == ()
    assert validate_local(bundle.path).ok


def test_an_ir_version_onnxruntime_refuses_gets_the_reference_evaluator(write_recipe, tmp_path):
    save(tmp_path / "ir-new.onnx", [helper.make_node("Relu", ["x"], ["y"])],
         [helper.make_tensor_value_info("x", T.FLOAT, [4])],
         [helper.make_tensor_value_info("y", T.FLOAT, [4])], ir_version=onnx.IR_VERSION)
    bundle = host_build(write_recipe, tmp_path, "ir-new")
    reference = bundle.manifest.golden_reference
    assert reference.startswith("onnx.reference.ReferenceEvaluator (onnx 1."), reference
    assert "onnxruntime refused" in reference
    assert validate_local(bundle.path).ok


def test_when_no_reference_runs_random_samples_are_named_as_the_likely_cause(write_recipe,
                                                                              tmp_path):
    # Tile's repeats computed from a graph input: edgekit cannot tell that it sets a size, and
    # the negative repeat counts its random values give fail in every reference
    save(tmp_path / "tile.onnx", [helper.make_node("Sub", ["r", "big"], ["n"]),
                                  helper.make_node("Tile", ["x", "n"], ["y"])],
         [helper.make_tensor_value_info("x", T.FLOAT, [2]),
          helper.make_tensor_value_info("r", T.INT64, [1])],
         [helper.make_tensor_value_info("y", T.FLOAT, ["n"])],
         initializers=[numpy_helper.from_array(np.array([1000], np.int64), "big")])
    proc = edgekit_here("build", "--recipe", str(write_recipe("model: {onnx: tile.onnx}\n")),
                        "--target", "host", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    line = one_error(proc)
    assert "no reference runs the model" in line and "'r'" in line and "samples:" in line


def zoo_cnn(path, input_name):
    """A zoo-style opset-9 CNN: Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm,
    Softmax."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", rng.normal(0, 0.3, (4, 3, 3, 3))), ("b", rng.normal(0, 0.1, 4)),
        ("scale", rng.uniform(0.5, 1.5, 4)), ("bias", rng.normal(0, 0.1, 4)),
        ("mean", rng.normal(0, 0.1, 4)), ("var", rng.uniform(0.5, 1.5, 4)),
        ("fc_w", rng.normal(0, 0.3, (5, 64))), ("fc_b", rng.normal(0, 0.1, 5))]]
    nodes = [helper.make_node("Conv", [input_name, "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"],
                              ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["prob"])]
    return save(path, nodes, [helper.make_tensor_value_info(input_name, T.FLOAT, [1, 3, 8, 8])],
                [helper.make_tensor_value_info("prob", T.FLOAT, [1, 5])], opset=9,
                ir_version=4, initializers=inits)


def test_an_opset_9_zoo_cnn_named_like_gpu_0_data_0_builds_and_validates(write_recipe,
                                                                          tmp_path):
    zoo_cnn(tmp_path / "zoo9.onnx", "gpu_0/data_0")
    recipe = write_recipe("name: zoo9\nmodel: {onnx: zoo9.onnx}\n")
    proc = edgekit_here("build", "--recipe", str(recipe), "--target", "host", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "opset 9 upgraded to 17 by onnx.version_converter" in proc.stdout
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    assert bundle.manifest.inputs[0].name == "gpu_0/data_0"
    assert any("opset 9 upgraded" in n for n in bundle.manifest.model_notes)
    assert validate_local(bundle.path).ok
    # declared in `inputs:` under the graph's own name
    declared = write_recipe("name: zoo9-declared\nmodel: {onnx: zoo9.onnx}\ninputs:\n"
                            "  - {name: gpu_0/data_0, shape: [1, 3, 8, 8]}\n", name="d.yaml")
    assert validate_local(build(BuildOptions(recipe=declared, target="host")).bundle.path).ok


def test_validation_runs_several_distinct_samples_for_onnx_and_pytorch(write_recipe, tmp_path):
    save(tmp_path / "sets.onnx", [helper.make_node("Gather", ["table", "ids"], ["y"])],
         [helper.make_tensor_value_info("table", T.FLOAT, [6, 2]),
          helper.make_tensor_value_info("ids", T.INT64, [3])],
         [helper.make_tensor_value_info("y", T.FLOAT, [3, 2])])
    torch_recipe = write_recipe('name: sets-torch\nmodel: {python: "@TINY@:linear_softmax"}\n',
                                name="t.yaml")
    for bundle in (host_build(write_recipe, tmp_path, "sets"),
                   build(BuildOptions(recipe=torch_recipe, target="host")).bundle):
        m = bundle.manifest
        assert len(m.more_golden) == 2
        firsts = [np.load(bundle.file(f)) for f in
                  (m.golden_inputs[0], *(s.inputs[0] for s in m.more_golden))]
        assert not any(np.array_equal(firsts[0], other) for other in firsts[1:])
        report = validate_local(bundle.path)
        assert report.ok and report.samples == 3, report
    # a wrong golden output of the third sample fails validation and names the sample
    wrong = bundle.file(m.more_golden[1].outputs[0])
    wrong.chmod(0o644)
    np.save(wrong, np.load(wrong) + 1)
    from edgekit.models.bundle import sha256_file, write_manifest
    from edgekit.toolchain.signing import sign_bundle
    write_manifest(bundle.path, m.model_copy(update={
        "files": {**m.files, m.more_golden[1].outputs[0]: sha256_file(wrong)}}))
    sign_bundle(bundle.path)
    report = validate_local(bundle.path)
    assert not report.ok and "sample 2" in report.outputs[0].problems[0]
