"""The dataset gate for ONNX models (issue 38): the build scores the set with the float ONNX
model on the host (onnxruntime) — for a QDQ model, `reference: fp32` is the model with its
activations' Q/DQ pairs removed. The digits classifier exported to ONNX passes on a device;
its int8 QDQ form calibrated on constant images matches its own golden outputs but is refused
by the gate against the float reference; `reference: golden` scores the QDQ model itself; a
QOperator model has no float form to take out: fp32 is refused in one line."""

import numpy as np
import onnx
import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.config.recipe import load_recipe
from edgekit.device.deploy import deploy_bundle
from edgekit.errors import ConfigError, ValidationFailed
from edgekit.pipeline.frontends.onnx import OnnxFrontend
from edgekit.pipeline.frontends.onnx_float import without_qdq
from edgekit.validate.dataset import load_set, score
from tests.fixtures import digits
from tests.local.conftest import current_of

# builds ONNX models with the compiler: the integration tier, beside the local devices it
# deploys to
pytestmark = pytest.mark.integration

LIMIT = 64            # one batch of runs.sh
RECIPE = """name: digits-onnx
model: {{onnx: {model}}}
validation:
  dataset: {{samples: test.npz, labels: labels.npy, metric: top1, max_drop: 0.01,
            limit: {limit}, reference: {reference}}}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-onnx")
    _, _, xt, yt = digits.data()
    np.savez(folder / "test.npz", image=xt)
    np.save(folder / "labels.npy", yt)
    digits.export_onnx(folder, np.full((8, 1, 64), 0.05, np.float32))   # digits_qdq.onnx
    return folder


def recipe(folder, model: str, reference: str = "fp32", extra: str = ""):
    path = folder / f"{model.split('.')[0]}-{reference}{'-x' if extra else ''}.yaml"
    path.write_text(RECIPE.format(model=model, limit=LIMIT, reference=reference) + extra)
    return path


def reference_outputs(folder, model: str, reference: str, extra: str = ""):
    """(outputs, labels) the build's dataset stage scores, without compiling."""
    r = load_recipe(recipe(folder, model, reference, extra))
    frontend = OnnxFrontend()
    exported = frontend.export(r, frontend.load(r))
    samples, labels = load_set(folder / "test.npz", folder / "labels.npy", 1, LIMIT)
    run = frontend.dataset_reference(r, exported, reference == "fp32")
    return [run(s) for s in samples], labels


def reference_score(folder, model: str, reference: str) -> float:
    return score("top1", *reference_outputs(folder, model, reference))


def test_the_float_onnx_model_is_the_reference_and_passes_on_the_device(make_device,
                                                                        folder):
    bundle = build(BuildOptions(recipe=recipe(folder, "digits.onnx"), target="host",
                                out=folder / "fp32")).bundle
    note = bundle.manifest.dataset
    assert (note.reference, note.count) == ("fp32", LIMIT) and note.reference_score >= 0.95
    result = deploy_bundle(make_device(), bundle)
    gate = result.accuracy["dataset"]
    assert result.activated and abs(gate["drop"]) <= 0.01, gate
    print(f"ONNX fp32: reference {gate['reference_score']:.4f}, measured {gate['measured']:.4f}")


def test_a_miscalibrated_qdq_build_is_refused_against_its_float_form(make_device, folder):
    bundle = build(BuildOptions(recipe=recipe(folder, "digits_qdq.onnx"), target="host",
                                out=folder / "qdq")).bundle
    assert bundle.manifest.quantization.mode == "int8"
    assert bundle.manifest.dataset.reference_score >= 0.9   # Q/DQ pairs out: float activations
    device = make_device()
    with pytest.raises(ValidationFailed) as err:
        deploy_bundle(device, bundle)
    line = str(err.value).splitlines()[0]
    print(line)
    assert line.startswith("dataset gate: top1 reference 0.9") and err.value.exit_code == 8
    assert current_of(device.root, "digits-onnx") is None
    # `reference: golden`: the QDQ model itself (onnxruntime) — what the device reproduced
    measured = float(line.split("measured ")[1].split(",")[0])
    assert reference_score(folder, "digits_qdq.onnx", "golden") == pytest.approx(measured,
                                                                                 abs=0.02)
    assert reference_score(folder, "digits_qdq.onnx", "fp32") == \
        bundle.manifest.dataset.reference_score


def test_a_qdq_models_float_model_is_its_fp32_reference_when_the_recipe_names_it(folder):
    named, _ = reference_outputs(folder, "digits_qdq.onnx", "fp32",
                                 "quantize: {mode: int8, float_model: digits.onnx}\n")
    stripped, _ = reference_outputs(folder, "digits_qdq.onnx", "fp32")
    own, _ = reference_outputs(folder, "digits.onnx", "fp32")
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(named, own))
    # without it, the weights keep their int8 rounding: near the float outputs, not equal
    # (1 % of the largest logit; with the folded Relu left out, 25 %)
    differences = [np.abs(a[0] - b[0]).max() for a, b in zip(stripped, own)]
    assert 0 < max(differences) < 0.02 * max(np.abs(b[0]).max() for b in own)


def test_qdq_pairs_are_taken_out_and_a_qoperator_model_refuses_fp32(folder, tmp_path):
    stripped = without_qdq(onnx.load(folder / "digits_qdq.onnx"), "digits_qdq.onnx")
    # onnxruntime folded the hidden Relu into its pair (range from 0): it comes back; the
    # input's pair starts at 0 too (images >= 0), the logits' does not
    assert [n.op_type for n in stripped.graph.node if n.op_type != "DequantizeLinear"] == \
        ["Flatten", "Relu", "Gemm", "Relu", "Gemm", "Identity"]
    paths = digits.export_onnx(tmp_path, np.full((2, 1, 64), 0.05, np.float32), "QOperator")
    with pytest.raises(ConfigError) as err:
        without_qdq(onnx.load(paths["QOperator"]), "digits_qoperator.onnx")
    assert err.value.exit_code == 2 and err.value.key == "validation.dataset.reference"
    assert "QGemm" in str(err.value) and "reference: golden" in err.value.hint
