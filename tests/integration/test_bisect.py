"""`edgekit bisect` with real torch-mlir and IREE: the valhall build that Mesa's llvmpipe runs
wrongly (the known real failure), a correct build, and an int8 build's error profile."""

import json

import numpy as np

from edgekit.api.bisect import BisectOptions, bisect
from edgekit.bisect import taps as T
from tests.fixtures.cli import edgekit_here

CONV_MEAN = 'name: {name}\nmodel:\n  python: "@TINY@:conv_mean"\n'


def test_bisect_names_the_mean_that_a_valhall_build_computes_wrongly_on_llvmpipe(
        write_recipe, tmp_path):
    # valhall SPIR-V on a device that is no Mali (the profile skips deploy's device check)
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    recipe = write_recipe(CONV_MEAN.format(name="mali-bisect"))
    out, html = tmp_path / "repro", tmp_path / "bisect.html"
    proc = edgekit_here("bisect", "--recipe", str(recipe), "--target",
                        str(tmp_path / "mali-unchecked.yaml"), "--local", "--out", str(out),
                        "--html", str(html), "--json")
    assert proc.returncode == 8, proc.stderr       # a divergence: validation's exit code
    result = json.loads(proc.stdout)
    first = result["first"]
    assert (first["op"], first["module"], first["module_type"]) == \
        ("aten.mean.dim", "", "ConvMean")
    assert first["max_abs_error"] > 1e-2 and not first["ok"]
    boundaries, ops = result["levels"]
    assert [t["op"] for t in boundaries["taps"]] == ["aten.conv2d.default", "aten.mean.dim"]
    assert boundaries["taps"][0]["ok"]             # the convolution is right
    assert [(t["op"], t["ok"]) for t in ops["taps"]] == [("aten.relu.default", True),
                                                        ("aten.mean.dim", False)]
    # the mean alone, fed the relu's real values, fails the same way
    assert result["reproducer"]["reproduced"]
    script = (out / "reproduce.sh").read_text()
    assert "aten.mean.dim" in script and "edgekit validate" in script
    again = edgekit_here("validate", str(out / "bundle"), "--local")
    assert again.returncode == 8, again.stderr
    page = html.read_text()
    assert page.count("<svg") == 2 and "aten.mean.dim" in page


def test_bisect_of_a_correct_build_reports_no_divergence(write_recipe):
    recipe = write_recipe(CONV_MEAN.format(name="right-bisect"))
    proc = edgekit_here("bisect", "--recipe", str(recipe), "--target", "vulkan-generic", "--local")
    assert proc.returncode == 0, proc.stderr
    assert "no divergence" in proc.stdout and "aten.mean.dim" in proc.stdout


def test_bisect_of_an_int8_build_profiles_the_quantization_error_per_layer(write_recipe):
    models = "edgekit.examples.models"
    recipe = write_recipe(f'name: cnn-q8\nmodel: {{python: "{models}:small_cnn"}}\nquantize: '
                          f'{{mode: int8, calibration: "{models}:small_cnn_calibration", '
                          f'min_cosine: 0.98}}\n')
    result = bisect(BisectOptions(recipe=recipe, target="host", local=True))
    assert result.quantization == "int8" and not result.diverges  # IREE = quantized PyTorch
    (level,) = result.levels
    assert len(level.rows) == 13 and level.rows[-1].tap.module == "head"
    profiled = [r for r in level.rows if r.fp32 is not None]
    assert len(profiled) == 9     # the 4 convolutions hold their folded batch norm
    # quantization error enters at the first layer and is still there at the logits
    assert all(r.fp32.max_abs_error > 1e-3 for r in profiled)
    assert all(r.check.max_abs_error < 1e-4 for r in level.rows)


def test_taps_sit_at_module_boundaries_and_then_at_every_op_of_one_module():
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.tanh(self.b(torch.relu(self.a(x)))) + x

    model = torch.nn.Sequential(Block(), torch.nn.Linear(4, 2)).eval()
    x = (torch.randn(3, 4),)
    gm = T.graph_of(torch.export.export(model, x))
    taps = T.boundary_taps(gm)
    assert [(t.module, t.op) for t in taps] == [
        ("0.a", "aten.linear.default"), ("0.b", "aten.linear.default"),
        ("0", "aten.add.Tensor"), ("1", "aten.linear.default")]
    assert taps[-1].output
    ops = T.op_taps(gm, taps[1].node, taps[2].node)
    assert [t.op for t in ops] == ["aten.tanh.default", "aten.add.Tensor"]
    tapped = T.with_taps(gm, taps)
    values = T.node_values(gm, x)
    for tap, got in zip(taps, tapped(*x)):
        np.testing.assert_array_equal(got.detach().numpy(), values[tap.node].numpy())
    node = next(n for n in gm.graph.nodes if n.name == taps[1].node)
    alone = T.OneOp(gm, node)
    np.testing.assert_allclose(alone(*(values[n] for n in alone.inputs)).detach().numpy(),
                               values[taps[1].node].numpy(), rtol=1e-6)




def test_bisect_of_an_onnx_model_compares_with_onnxruntime_and_names_the_reducemean(tmp_path):
    import warnings

    import torch

    from tests.fixtures.tiny_models import conv_mean
    model, example = conv_mean()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, example, str(tmp_path / "cm.onnx"), dynamo=False,
                          input_names=["x"])
    (tmp_path / "recipe.yaml").write_text("name: cm-onnx\nmodel:\n  onnx: cm.onnx\n")
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    result = bisect(BisectOptions(recipe=tmp_path / "recipe.yaml",
                                  target=str(tmp_path / "mali-unchecked.yaml"), local=True,
                                  out=tmp_path / "repro"))
    (level,) = result.levels          # one node per boundary: no finer level needed
    assert [(r.tap.op, r.check.ok) for r in level.rows] == [
        ("onnx.Conv", True), ("onnx.Relu", True), ("onnx.ReduceMean", False)]
    assert result.first.tap.op == "onnx.ReduceMean" and result.reproducer.reproduced


def test_an_fp16_build_whose_outputs_validate_has_no_divergence_but_a_rounding_profile(
        write_recipe):
    recipe = write_recipe('name: cnn16\nmodel: {python: "edgekit.examples.models:small_cnn"}\n'
                          'quantize: {mode: fp16}\n')
    result = bisect(BisectOptions(recipe=recipe, target="host", local=True))
    assert result.quantization == "fp16" and not result.diverges
    (level,) = result.levels
    # no batch norm is folded in an fp16 build: every tap has its float twin
    assert all(r.fp32 is not None for r in level.rows)
    assert level.rows[-1].check.ok and level.rows[-1].tap.output


def test_bisect_of_a_bundle_rebuilds_it_from_its_manifest_and_names_the_mean(
        write_recipe, tmp_path):
    # the valhall-on-llvmpipe case again, this time from the built bundle, not the recipe
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    recipe = write_recipe(CONV_MEAN.format(name="mali-bundle-bisect"))
    bundle = tmp_path / "bundle"
    built = edgekit_here("build", "--recipe", str(recipe),
                         "--target", str(tmp_path / "mali-unchecked.yaml"), "--out", str(bundle))
    assert built.returncode == 0, built.stderr
    proc = edgekit_here("bisect", "--bundle", str(bundle), "--local", "--out",
                        str(tmp_path / "repro"), "--json")
    assert proc.returncode == 8, proc.stderr
    first = json.loads(proc.stdout)["first"]
    assert (first["op"], first["module_type"]) == ("aten.mean.dim", "ConvMean")
    # the model changed since the build: refused in one line, pointing at --recipe
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["model_digest"] = "0" * 64
    other = tmp_path / "other"
    import shutil
    shutil.copytree(bundle, other)
    (other / "manifest.json").write_text(json.dumps(manifest))
    refused = edgekit_here("bisect", "--bundle", str(other), "--local")
    assert refused.returncode not in (0, 8) and "Traceback" not in refused.stderr
    assert "--recipe" in refused.stderr, refused.stderr


def test_bisect_of_a_tuned_recipe_builds_the_tuned_variant_as_the_build_would(
        write_recipe, tmp_path, monkeypatch):
    from edgekit.config.profiles import load_target
    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.tune.tuner import CandidateResult, TuningRecord, _store
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))   # this test's record only
    recipe = write_recipe(CONV_MEAN.format(name="tuned-bisect"))
    loaded = load_recipe(recipe)
    frontend = frontend_for(loaded.model)
    digest = frontend.export(loaded, frontend.load(loaded)).digest
    chosen = CandidateResult(lowering="linalg", flag_set="o3", flags=("--iree-opt-level=O3",),
                             threads=1, status="ok", p50_ms=1.0)
    target = load_target("host")
    _store(TuningRecord(model_digest=digest, app="tuned-bisect", target="host", toolchain={},
                        measured_on="here", created_at="now", chosen=chosen,
                        default_variant="tosa/default", default_p50_ms=2.0,
                        candidates=(chosen,)), target)
    result = bisect(BisectOptions(recipe=recipe, target="host", local=True))
    assert not result.diverges
    assert any("tuned variant linalg/o3" in n for n in result.notes), result.notes
    untuned = bisect(BisectOptions(recipe=recipe, target="host", local=True, use_tuned=False))
    assert not any("tuned" in n for n in untuned.notes)
