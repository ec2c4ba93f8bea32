"""Quantized builds with the real PT2E → torch-mlir → IREE chain on small in-tree models."""

import numpy as np
import pytest
import torch

from edgekit import BuildOptions, build, validate_local
from edgekit.config.recipe import load_recipe
from edgekit.errors import QuantizationError
from edgekit.pipeline.frontends.registry import frontend_for
from tests.integration.helpers import edgekit

MODELS = "edgekit.examples.models"


def recipe_text(model: str, quantize: str) -> str:
    return f'name: {model}\nmodel: {{python: "{MODELS}:{model}"}}\nquantize: {quantize}\n'


def int8(model: str, extra: str = "") -> str:
    return recipe_text(model, f'{{mode: int8, calibration: "{MODELS}:{model}_calibration"{extra}}}')


def run_module(bundle, inputs):
    from iree.runtime import load_vm_flatbuffer_file
    module = load_vm_flatbuffer_file(str(bundle.module), driver="local-sync")
    return np.asarray(module.main(*inputs))


def output_lsb(program: torch.export.ExportedProgram) -> float:
    """One step of the output's integer grid: activation scale × the largest weight scale of
    the contraction (a linear layer here) that produces the model's output."""
    graph = program.module()
    linear = [n for n in graph.graph.nodes if n.target == torch.ops.aten.linear.default][-1]
    activation, weight = linear.args[0], linear.args[1]
    scales = weight.args[1]
    weight_scale = getattr(graph, scales.target) if scales.op == "get_attr" else scales
    return float(activation.args[1]) * float(torch.as_tensor(weight_scale).max())


def test_int8_cnn_for_host_is_integer_validates_and_matches_the_quantized_model(write_recipe):
    # a classifier whose logits are output_0: top-1 agreement is asked for by name
    path = write_recipe(int8("small_cnn") + "validation: {outputs: {output_0: {top1: always}}}\n")
    bundle = build(BuildOptions(recipe=path, target="host")).bundle
    q = bundle.manifest.quantization
    assert q.mode == "int8" and q.weights == "per-channel" and q.lowering == "torch"
    assert q.contractions.total == 5 and q.contractions.integer == 5  # 4 convs + the head
    assert "16 samples" in q.calibration
    accuracy = q.accuracy.outputs[0]
    assert q.accuracy.samples == 8 and 0.98 < accuracy.min_cosine < 1.0
    assert accuracy.top1_agreement is not None
    assert validate_local(bundle.path).ok
    # the compiled module reproduces the quantized PyTorch model to within one output step
    recipe = load_recipe(path)
    frontend = frontend_for(recipe.model)
    quantized = frontend.quantize(recipe, frontend.export(recipe, frontend.load(recipe)))
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        expected = quantized.program.module()(torch.from_numpy(x)).detach().numpy()
        assert np.abs(run_module(bundle, [x]) - expected).max() <= output_lsb(quantized.program)


@pytest.mark.parametrize("target", ["host", "rpi4"])
def test_int8_transformer_block_builds_with_integer_contractions(write_recipe, target):
    bundle = build(BuildOptions(recipe=write_recipe(int8("transformer_block")),
                                target=target)).bundle
    q = bundle.manifest.quantization
    # qkv, projection, two MLP layers integer; the attention scores and attention × values
    # (two computed operands) stay float by default, and the manifest says so
    assert q.quantized_ops == q.contractions.integer == 4 and q.contractions.total == 6
    assert q.float_matmuls == 2 and not q.allow_float_contractions
    assert q.accuracy.outputs[0].min_cosine > 0.999
    if target == "host":
        assert validate_local(bundle.path).ok
    else:
        assert "--iree-llvmcpu-target-cpu=cortex-a72" in bundle.manifest.compile_flags


def test_attention_matmuls_are_integer_when_the_recipe_asks(write_recipe, tmp_path):
    bundle = build(BuildOptions(recipe=write_recipe(int8("transformer_block",
                                                         ", activation_matmuls: int8")),
                                target="host", out=tmp_path / "b", use_tuned=False)).bundle
    q = bundle.manifest.quantization
    assert q.contractions.integer == q.contractions.total == 6 and q.float_matmuls == 0
    assert validate_local(bundle.path).ok


def test_a_lowering_that_computes_in_float_is_refused_as_int8(write_recipe):
    path = write_recipe(int8("transformer_block") + "lowering: linalg\n")
    proc = edgekit("build", "--recipe", str(path), "--target", "host")
    assert proc.returncode == 18, proc.stderr
    assert "contractions compute in floating point after the linalg lowering" in proc.stderr
    assert "refusing to call this module int8" in proc.stderr and "Traceback" not in proc.stderr


def test_a_cosine_floor_fails_the_build(write_recipe):
    path = write_recipe(int8("small_cnn", ", min_cosine: 0.9999999"))
    with pytest.raises(QuantizationError, match="below the recipe's floor min_cosine"):
        build(BuildOptions(recipe=path, target="host"))
    proc = edgekit("build", "--recipe", str(path), "--target", "host")
    assert proc.returncode == 18 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("model", ["small_cnn", "transformer_block"])
def test_int8_weights_and_fp16_build_and_validate(write_recipe, model, tmp_path):
    def built(quantize: str):
        recipe = write_recipe(recipe_text(model, quantize), f"{quantize}.yaml")
        return build(BuildOptions(recipe=recipe, target="host",
                                  out=tmp_path / f"{model}-{quantize}")).bundle

    fp32, weights, fp16 = built("null"), built("int8-weights"), built("fp16")
    for bundle in (weights, fp16):
        assert validate_local(bundle.path).ok
        assert bundle.manifest.quantization.accuracy.outputs[0].min_cosine > 0.999
    assert weights.module.stat().st_size < 0.8 * fp32.module.stat().st_size
    census = fp16.manifest.quantization.contractions
    assert census.f16 == census.total > 0
    # golden outputs are the fp16 reference's, not the fp32 model's
    golden = [np.load(b.file(b.manifest.golden_outputs[0])) for b in (fp32, fp16)]
    assert not np.array_equal(golden[0], golden[1])
