"""ONNX models quantized by onnxruntime (quantize_static): QDQ models build as int8 through the
real torch-mlir ONNX importer and IREE's ONNX input; QOperator models (QLinearConv,
MatMulInteger, …) too, with the same int8 contraction census."""

import numpy as np
import onnx
import pytest

from edgekit import BuildOptions, build, validate_local
from edgekit.examples.onnx_quantized import export_quantized
from edgekit.api.compare_quantization import compare_quantization
from tests.integration.helpers import edgekit


@pytest.fixture(scope="module")
def onnx_models(tmp_path_factory):
    directory = tmp_path_factory.mktemp("onnx-quantized")
    export_quantized(directory, "small_cnn", "image", ("QDQ", "QOperator"))
    export_quantized(directory, "transformer_block", "x")
    return directory


def write(directory, name: str, text: str):
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def output_lsb(qdq_path) -> float:
    """One step of the output's int8 grid: the scale of the DequantizeLinear that produces the
    graph's output."""
    model = onnx.load(str(qdq_path))
    producer = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    assert producer.op_type == "DequantizeLinear"
    scale = next(t for t in model.graph.initializer if t.name == producer.input[1])
    return float(onnx.numpy_helper.to_array(scale))


def run_module(bundle, inputs):
    from iree.runtime import load_vm_flatbuffer_file
    module = load_vm_flatbuffer_file(str(bundle.module), driver="local-sync")
    return np.asarray(module.main(*inputs))


def test_a_qdq_cnn_builds_integer_validates_and_compares_with_its_fp32_model(onnx_models):
    recipe = write(onnx_models, "cnn_qdq", "name: cnn-qdq\nmodel: {onnx: small_cnn_qdq.onnx}\n"
                   "quantize: {mode: int8, float_model: small_cnn.onnx}\n")
    results = {r.mode: r for r in compare_quantization(
        BuildOptions(recipe=recipe, target="host", out=onnx_models / "build" / "cnn"),
        rounds=2, repetitions=3)}
    assert results["fp32"].status == "built" and results["int8"].status == "built"
    assert results["int8-weights"].status == results["fp16"].status == "skipped"
    assert results["fp32"].bundle.manifest.model_source == "small_cnn.onnx"
    assert results["fp32"].bundle.manifest.quantization is None
    bundle = results["int8"].bundle
    q = bundle.manifest.quantization
    assert q.mode == "int8" and q.weights == "per-channel" and q.lowering == "torch"
    assert q.quantized_ops == 5 and q.contractions.integer == q.contractions.total == 5
    assert "--iree-input-type=onnx" in bundle.manifest.compile_flags
    assert q.accuracy.reference == "fp32 ONNX model small_cnn.onnx"
    assert 0.95 < q.accuracy.outputs[0].min_cosine < 1.0
    # int8 weights are a quarter of fp32's; the module also carries its convolutions' patch
    # index tables (23 KB, frontends/onnx_int8.py) and integer matmul kernels; the `u8` form
    # (an AVX-512 VNNI host) also each matmul's scale and bias as rows × cout constants (the
    # small CNN: 159 KB `on`, 306 KB u8; fp32 270 KB), as the PT2E build's u8 form does
    u8 = "--iree-llvmcpu-enable-inner-tiled" in bundle.manifest.compile_flags
    assert results["int8"].size < (1.2 if u8 else 0.65) * results["fp32"].size
    assert validate_local(bundle.path).ok
    # the compiled module reproduces the QDQ model (onnxruntime) within one output step
    import onnxruntime as ort
    session = ort.InferenceSession(str(onnx_models / "small_cnn_qdq.onnx"),
                                   providers=["CPUExecutionProvider"])
    lsb = output_lsb(onnx_models / "small_cnn_qdq.onnx")
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        expected = session.run(None, {"image": x})[0]
        assert np.abs(run_module(bundle, [x]) - expected).max() <= lsb * 1.001


def test_a_qdq_transformer_block_builds_integer_for_rpi4(onnx_models):
    recipe = write(onnx_models, "block_qdq",
                   "name: block-qdq\nmodel: {onnx: transformer_block_qdq.onnx}\n")
    bundle = build(BuildOptions(recipe=recipe, target="rpi4",
                                out=onnx_models / "build" / "block-rpi4")).bundle
    q = bundle.manifest.quantization
    # qkv, attention scores, attention × values, projection, two MLP layers
    assert q.contractions.integer == q.contractions.total == 6
    assert q.accuracy is None  # no fp32 model named: nothing to compare with
    assert "--iree-llvmcpu-target-cpu=cortex-a72" in bundle.manifest.compile_flags


def test_a_qdq_model_through_a_float_lowering_is_refused(onnx_models):
    recipe = write(onnx_models, "cnn_tosa", "name: cnn-tosa\nmodel: {onnx: small_cnn_qdq.onnx}\n"
                   "lowering: tosa\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host",
                   "--out", str(onnx_models / "build" / "tosa"))
    assert proc.returncode == 18, proc.stderr
    assert "contractions compute in floating point after the tosa lowering" in proc.stderr
    assert "Traceback" not in proc.stderr


def qoperator_model(path):
    """x (uint8) → QLinearConv 3x3 (int8 weights, 4→8 channels) → flattened → MatMulInteger
    with int8 weights: the two QOperator contractions IREE's ONNX input compiles."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("x_scale", np.float32(0.02)), ("x_zp", np.uint8(128)),
        ("w", rng.integers(-60, 60, (8, 4, 3, 3), dtype=np.int8)),
        ("w_scale", np.float32(0.01)), ("w_zp", np.int8(0)),
        ("y_scale", np.float32(0.05)), ("y_zp", np.uint8(128)),
        ("shape", np.array([1, 8 * 6 * 6], np.int64)),
        ("m", rng.integers(-60, 60, (8 * 6 * 6, 10), dtype=np.int8)),
        ("a_zp", np.uint8(128)), ("m_zp", np.int8(0))]]
    nodes = [helper.make_node("QLinearConv", ["x", "x_scale", "x_zp", "w", "w_scale", "w_zp",
                                              "y_scale", "y_zp"], ["y"]),
             helper.make_node("Reshape", ["y", "shape"], ["flat"]),
             helper.make_node("MatMulInteger", ["flat", "m", "a_zp", "m_zp"], ["out"])]
    graph = helper.make_graph(
        nodes, "qop", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.INT32, [1, 10])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


def test_a_qoperator_model_builds_int8_through_irees_onnx_input(onnx_models):
    qoperator_model(onnx_models / "qop.onnx")
    recipe = write(onnx_models, "qop", "name: qop\nmodel: {onnx: qop.onnx}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host",
                                out=onnx_models / "build" / "qop")).bundle
    q = bundle.manifest.quantization
    assert q.mode == "int8" and q.lowering == "torch" and "QOperator" in q.calibration
    assert q.contractions.integer == q.contractions.total == 2, q.contractions
    assert validate_local(bundle.path).ok


def test_a_qoperator_model_irees_input_cannot_compile_names_the_op(onnx_models):
    # onnxruntime's QOperator export of the CNN uses com.microsoft's QGemm
    recipe = write(onnx_models, "cnn_qop",
                   "name: cnn-qop\nmodel: {onnx: small_cnn_qoperator.onnx}\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host",
                   "--out", str(onnx_models / "build" / "cnn-qop"))
    assert proc.returncode == 4, proc.stderr
    line = " ".join(proc.stderr.split())
    assert "unsupported op(s) onnx." in line and "torch: compile: " in line, line
    assert "Traceback" not in line
    assert not (onnx_models / "build" / "cnn-qop").exists()


def test_check_says_which_path_a_quantized_onnx_model_takes(onnx_models, tmp_path):
    qdq = edgekit("check", str(onnx_models / "transformer_block_qdq.onnx"), "--target", "host",
                  cwd=tmp_path)
    assert qdq.returncode == 0, qdq.stderr
    assert "QDQ int8 model: 6 of 6 contractions" in " ".join(qdq.stdout.split())
    assert "would use torch" in qdq.stdout
    qop = edgekit("check", str(onnx_models / "small_cnn_qoperator.onnx"), "--target", "host",
                  "--json", cwd=tmp_path)
    import json
    report = json.loads(qop.stdout)
    assert report["chosen"] is None and "QOperator int8 model" in report["note"]
    assert qop.returncode == 4 and "error: no lowering builds" in qop.stderr  # NotBuildable
