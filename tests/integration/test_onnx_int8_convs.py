"""ONNX QDQ convolutions (onnxruntime's quantize_static) reach the integer matmul path:
`--edgekit-int8-convs-as-matmul` (host's int8 flags) rewrites them as an int8 im2col + a
DequantizeLinear→MatMul pair, which IREE compiles as an integer matmul; the module still
reproduces onnxruntime's QDQ outputs."""

import re
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgekit import BuildOptions, build, validate_local
from edgekit.pipeline.frontends.onnx_int8 import int8_convs_as_matmul, with_byte_gathers
from edgekit.pipeline.frontends.onnx_source import load_onnx
from edgekit.toolchain import iree, torch_mlir


class TinyCNN(nn.Module):
    """3 channels (padded to 4: int32 words), 8 (int64 words), a stride, a depthwise conv (left
    as it is: grouped) when asked."""

    def __init__(self, depthwise: bool = False):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16) if depthwise else nn.Identity()
        self.head = nn.Linear(16 * 6 * 6, 5)

    def forward(self, x):
        x = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.head(torch.relu(self.dw(x)).flatten(1))


def qdq_model(directory, depthwise: bool = False):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    torch.manual_seed(0)
    fp32, qdq = directory / f"tiny{depthwise:d}.onnx", directory / f"tiny{depthwise:d}_qdq.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(TinyCNN(depthwise).eval(), (torch.randn(1, 3, 12, 12),), str(fp32),
                          dynamo=False, input_names=["image"], opset_version=17)
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"image": rng.standard_normal((1, 3, 12, 12))
                                  .astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)
    # onnxruntime's default activations, uint8 (bench/onnx_qdq.py and test_quantize_onnx.py
    # build int8 ones)
    quantize_static(str(fp32), str(qdq), Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    return qdq


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return qdq_model(tmp_path_factory.mktemp("onnx-int8-convs"))


def integer_contractions(model, tmp_path) -> list[int]:
    """The loop count of each integer contraction (a linalg.generic with a reduction and
    int8 operands) after IREE's global optimization of the model as the build imports it
    (the torch lowering: IREE's ONNX input): 6 for a convolution of one image, 3 for a
    matmul, 2 for a matvec; -1 for a contraction on other types."""
    source = tmp_path / "input.mlirbc"
    source.write_bytes(torch_mlir.import_onnx_form(model))
    ir = iree.global_optimization_ir(source, (
        "--iree-input-type=onnx", "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu"))
    loops = []
    for line in ir.splitlines():
        found = iree.contraction_element_types(line)
        if found:
            integer = found[0][1] == ("i8", "i8")
            iterators = re.search(r"iterator_types = \[([^\]]*)\]", line)
            loops.append(iterators.group(1).count('"') // 2 if integer and iterators else -1)
    return loops


def test_qdq_convolutions_become_integer_matmuls_not_integer_convolutions(tiny, tmp_path):
    model = load_onnx(tiny)                 # as the build loads it (shapes inferred)
    assert integer_contractions(model, tmp_path) == [6, 6, 2]
    rewritten, done, total = int8_convs_as_matmul(model)
    assert (done, total) == (2, 2)
    # two matmuls (the convolutions) and the head's matvec, all on int8 (uint8 activations are
    # signless i8 here)
    assert integer_contractions(rewritten, tmp_path) == [3, 3, 2]


def test_the_rewritten_graph_computes_what_the_qdq_model_computes(tiny):
    """Its byte-gather form (what the tosa/linalg lowerings import) is plain ONNX: onnxruntime
    runs it, unoptimized, and gets the QDQ model's outputs exactly."""
    import onnxruntime as ort
    model = load_onnx(tiny)
    rewritten, _, _ = int8_convs_as_matmul(model)
    # per convolution: the uint8 table as int8 bits (then flipped), as words, the patches back
    assert sum(n.op_type == "EdgekitViewDtype" for n in rewritten.graph.node) == 6
    plain = with_byte_gathers(rewritten)
    assert not any(n.domain for n in plain.graph.node)
    assert {"Conv"}.isdisjoint(n.op_type for n in plain.graph.node)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ours, theirs = (ort.InferenceSession(m.SerializeToString(), options,
                                         providers=["CPUExecutionProvider"])
                    for m in (plain, model))
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = {"image": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
        assert np.array_equal(ours.run(None, x)[0], theirs.run(None, x)[0])


def test_the_u8_form_has_no_matvec_and_computes_what_the_qdq_model_computes(tiny, tmp_path):
    """The u8 form (uint8 patches, per-tensor matmuls, the head on two rows): three integer
    matmuls, no matvec (IREE's inner-tiled path fails on one); its byte-gather form, run by
    onnxruntime, within one output step of the QDQ model (x · (1/s) for x / s in each
    quantize: a step apart on an exact tie only)."""
    import onnxruntime as ort
    model = load_onnx(tiny)
    rewritten, done, total = int8_convs_as_matmul(model, unsigned=True)
    assert (done, total) == (2, 2)
    assert {"Conv", "Gemm", "QuantizeLinear"}.isdisjoint(n.op_type for n in rewritten.graph.node)
    assert integer_contractions(rewritten, tmp_path) == [3, 3, 3]
    plain = with_byte_gathers(rewritten)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ours, theirs = (ort.InferenceSession(m.SerializeToString(), options,
                                         providers=["CPUExecutionProvider"])
                    for m in (plain, model))
    out_dq = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    lsb = float(next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer
                     if t.name == out_dq.input[1]))
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = {"image": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)}
        assert np.abs(ours.run(None, x)[0] - theirs.run(None, x)[0]).max() <= lsb * 1.001


def test_a_grouped_convolution_is_left_as_it_is(tmp_path):
    model = load_onnx(qdq_model(tmp_path, depthwise=True))
    rewritten, done, total = int8_convs_as_matmul(model)
    assert (done, total) == (2, 3)
    convs = [n for n in rewritten.graph.node if n.op_type == "Conv"]
    assert len(convs) == 1 and convs[0].attribute and any(
        a.name == "group" and a.i == 16 for a in convs[0].attribute)


def test_a_qdq_cnn_builds_through_the_integer_matmuls_and_validates(tiny, tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"name: tiny-qdq\nmodel: {{onnx: {tiny}}}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", out=tmp_path / "b")).bundle
    lowering, q = bundle.manifest.lowering, bundle.manifest.quantization
    # host's int8 flags ask for `u8` on an AVX-512 VNNI CPU (`on` elsewhere): every
    # contraction here has the u8 form (the head: two rows), so it takes it with IREE's
    # inner-tiled path, and the note says so
    assert ("2 of 2 int8 convolutions as int8 im2col + integer matmul (ONNX QDQ graph, "
            "--edgekit-int8-convs-as-matmul=") in lowering.note, lowering.note
    assert "=on)" in lowering.note or (
        "=u8); --iree-llvmcpu-enable-inner-tiled added" in lowering.note and
        "--iree-llvmcpu-enable-inner-tiled" in bundle.manifest.compile_flags), lowering.note
    assert q.mode == "int8" and q.contractions.integer == q.contractions.total == 3
    assert validate_local(bundle.path).ok
    # the module reproduces onnxruntime's QDQ outputs within one step of the output's grid
    import onnxruntime as ort
    from iree.runtime import load_vm_flatbuffer_file
    model = onnx.load(str(tiny))
    out_dq = next(n for n in model.graph.node if n.output[0] == model.graph.output[0].name)
    lsb = float(next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer
                     if t.name == out_dq.input[1]))
    session = ort.InferenceSession(str(tiny), providers=["CPUExecutionProvider"])
    module = load_vm_flatbuffer_file(str(bundle.module), driver="local-sync")
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
        got = np.asarray(module.main(x))
        assert np.abs(got - session.run(None, {"image": x})[0]).max() <= lsb * 1.001


def test_the_rpi5_build_of_a_qdq_cnn_runs_its_convolutions_on_sdot(tiny, tmp_path):
    from edgekit.api.inspect import kernels
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"name: tiny-qdq\nmodel: {{onnx: {tiny}}}\n")
    bundle = build(BuildOptions(recipe=recipe, target="rpi5", out=tmp_path / "b",
                                use_tuned=False)).bundle
    assert "2 of 2 int8 convolutions as int8 im2col" in bundle.manifest.lowering.note
    found = kernels(bundle.path)
    matmuls = [d for d in found.dispatches if "matmul" in d.function]
    assert len(matmuls) == 2 and not [d for d in found.dispatches if "conv" in d.function]
    # each convolution's hot loop multiplies on integer dot products (estimates aside)
    assert all(d.census.get("sdot", 0) for d in matmuls), [(d.function, d.census)
                                                           for d in matmuls]
