"""Validation that proves something: golden outputs a wrong module would reproduce are refused
at build time; output dtypes survive IREE's signless integers."""

import json
from pathlib import Path

import numpy as np
import pytest

from edgekit import BuildOptions, build, validate_local
from edgekit.errors import UninformativeGolden
from tests.fixtures.cli import edgekit_here

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "validation_models.py"


def recipe(write_recipe, factory: str, extra: str = "") -> Path:
    return write_recipe(f'name: {factory.replace("_", "-")}\n'
                        f'model:\n  python: "{MODELS}:{factory}"\n{extra}')


def test_a_zero_initialised_head_is_refused_in_one_line_naming_the_output(write_recipe):
    path = recipe(write_recipe, "zero_head_classifier")
    proc = edgekit_here("build", "--recipe", str(path), "--target", "host")
    assert proc.returncode == 8, proc.stderr
    assert "Traceback" not in proc.stderr
    first = [line for line in proc.stderr.splitlines() if "golden output" in line]
    assert len(first) == 1
    assert "golden output 'output_0' cannot tell a right module from a wrong one: all 10 " \
           "values are 0" in first[0]
    assert "accept_uninformative: [output_0]" in proc.stderr


def test_a_uniform_softmax_is_refused_before_anything_compiles(write_recipe):
    with pytest.raises(UninformativeGolden, match="all 10 values are 0.2") as err:
        build(BuildOptions(recipe=recipe(write_recipe, "dead_softmax"), target="host",
                           use_cache=False))
    assert err.value.output == "output_0"


def test_accepted_knowingly_it_builds_and_validates_by_error_alone(write_recipe, tmp_path):
    path = recipe(write_recipe, "zero_head_classifier",
                  "validation:\n  accept_uninformative: [output_0]\n")
    result = build(BuildOptions(recipe=path, target="host"))
    assert "import" in result.stage_seconds or result.cached
    report = validate_local(result.bundle.path)
    out = report.outputs[0]
    assert report.ok and out.cosine is None and out.top1_agreement is None
    proc = edgekit_here("validate", str(result.bundle.path), "--local", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["outputs"][0]["cosine"] is None


def test_a_recipe_object_accepts_it_programmatically(write_recipe):
    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.build import FRONT
    from edgekit.pipeline.stages import run_plan
    loaded = load_recipe(recipe(write_recipe, "dead_softmax"))
    accepting = loaded.model_copy(update={"validation": loaded.validation.model_copy(
        update={"accept_uninformative": True})})
    assert run_plan(FRONT, accepting, accepting, {}, None).golden[0].shape == (2, 5)
    with pytest.raises(UninformativeGolden):
        run_plan(FRONT, loaded, loaded, {}, None)


@pytest.mark.parametrize("lowering", ["linalg", "torch"])
def test_a_uint8_output_comes_back_uint8_and_validates(write_recipe, lowering):
    path = recipe(write_recipe, "add_uint8", f"lowering: {lowering}\n")
    bundle = build(BuildOptions(recipe=path, target="host")).bundle
    assert [o.dtype for o in bundle.manifest.outputs] == ["uint8", "bool"]
    report = validate_local(bundle.path)
    assert report.ok, [o.problems for o in report.outputs]
    assert report.outputs[0].limits == "exact (uint8: exact)"
    # what iree-run-module wrote is int8; read as the manifest says it is uint8 [101, 44, 4, 3]
    golden = np.load(bundle.file(bundle.manifest.golden_outputs[0]))
    assert golden.dtype == np.uint8 and golden.tolist() == [[101, 44, 4, 3]]


def test_the_in_process_runner_returns_the_declared_dtype(write_recipe):
    from edgekit.compile.runners import make_runner
    bundle = build(BuildOptions(recipe=recipe(write_recipe, "add_uint8", "lowering: linalg\n"),
                                target="host")).bundle
    runner = make_runner(bundle, graph=0, device=None, identity=None)
    x = np.array([[255, 0, 7, 128]], np.uint8)
    total, greater = runner.run([x, np.array([[1, 1, 1, 1]], np.uint8)])
    assert total.dtype == np.uint8 and total.tolist() == [[0, 1, 8, 129]]
    assert greater.dtype == np.bool_ and greater.tolist() == [[True, False, True, True]]


def test_a_float16_model_is_held_to_the_float16_rule_not_float32s(write_recipe):
    bundle = build(BuildOptions(recipe=recipe(write_recipe, "half_mlp"), target="host")).bundle
    assert bundle.manifest.outputs[0].dtype == "float16"
    report = validate_local(bundle.path)
    out = report.outputs[0]
    assert report.ok and out.limits.endswith("(float16 default: 8 eps)")
    assert out.max_abs_error > 1e-4   # a few float16 ulps: float32's atol would cry wolf
    strict = build(BuildOptions(recipe=recipe(write_recipe, "half_mlp",
                                              "validation: {atol: 1.0e-4, rtol: 1.0e-3}\n"),
                                target="host")).bundle
    assert not validate_local(strict.path).ok


BF16_MODULE = """
func.func @main(%a: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xi8>) {
  %e = tensor.empty() : tensor<4xbf16>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%a : tensor<4xf32>) outs(%e : tensor<4xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4xbf16>
  %c = arith.constant dense<[1, -56, 3, -1]> : tensor<4xi8>
  return %r, %c : tensor<4xbf16>, tensor<4xi8>
}
"""


def test_a_bfloat16_output_is_written_raw_and_read_back_as_bfloat16(tmp_path):
    """iree-run-module cannot write bfloat16 as .npy ("unsupported data encoding"): the
    output file name says .bin for it, and the bytes are read as the declared dtype."""
    import iree.compiler as ic
    import ml_dtypes

    from edgekit.toolchain import iree
    from edgekit.validate.outputs import output_file, read_output
    module = tmp_path / "m.vmfb"
    module.write_bytes(ic.compile_str(BF16_MODULE, target_backends=["llvm-cpu"],
                                      extra_args=["--iree-llvmcpu-target-cpu=host"]))
    x = np.array([1.5, 2.25, -3.0, 1e-3], np.float32)
    np.save(tmp_path / "x.npy", x)
    declared = (("bfloat16", (4,)), ("uint8", (4,)))
    outputs = [tmp_path / output_file(i, d) for i, (d, _) in enumerate(declared)]
    iree.run_module(module, "local-sync", "main", [tmp_path / "x.npy"], outputs)
    bf16, u8 = (read_output(p, d, s) for p, (d, s) in zip(outputs, declared))
    assert bf16.dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.array_equal(bf16, x.astype(ml_dtypes.bfloat16))
    assert u8.dtype == np.uint8 and u8.tolist() == [1, 200, 3, 255]
