"""The dataset gate on a real labelled set: a digits classifier (scikit-learn's 8×8 digits,
trained in the test: ~98 % held out) built fp32 and int8, its float score measured by the build
and stored in the manifest, scored on a device before activation. An int8 build calibrated on
constant images matches its own golden outputs (the golden check passes: its reference is the
same mis-calibrated model) but loses most of its accuracy: the dataset gate refuses it."""

import json

import pytest

from edgekit.device.deploy import deploy_bundle
from edgekit.errors import ValidationFailed
from edgekit.models.bundle import MANIFEST
from tests.fixtures import digits
from tests.local.conftest import current_of, set_manifest

# builds three models with the compiler (about 3 min): the integration tier, beside the local
# devices it deploys to
pytestmark = pytest.mark.integration

LIMIT = digits.LIMIT


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    return digits.build_digits(tmp_path_factory.mktemp("digits"))


def test_the_build_stores_the_float_models_score_and_the_set(bundles):
    for bundle in bundles.values():
        note = bundle.manifest.dataset
        assert (note.metric, note.reference, note.count) == ("top1", "fp32", LIMIT)
        assert note.reference_score >= 0.95
        assert "golden/ds-199-0.npy" in bundle.manifest.files
    # every build's reference is the same float model
    assert len({b.manifest.dataset.reference_score for b in bundles.values()}) == 1


@pytest.mark.parametrize("name", ["fp32", "int8"])
def test_fp32_and_int8_builds_pass_the_gate_on_the_device(make_device, bundles, name):
    result = deploy_bundle(make_device(), bundles[name])
    score = result.accuracy["dataset"]
    assert result.activated and score["drop"] <= 0.01, score
    print(f"{name}: reference {score['reference_score']:.4f}, measured {score['measured']:.4f}")


def test_a_miscalibrated_int8_build_passes_golden_outputs_but_not_the_dataset_gate(
        make_device, bundles, bundle_copy):
    device = make_device()
    with pytest.raises(ValidationFailed) as err:
        deploy_bundle(device, bundles["miscalibrated"])
    line = str(err.value).splitlines()[0]
    assert line.startswith("dataset gate: top1 reference 0.9"), line
    assert current_of(device.root, "digits") is None
    print(line)

    def golden_only(directory):   # the same bundle without its dataset gate
        set_manifest(directory, dataset=None)
    result = deploy_bundle(device, bundle_copy(bundles["miscalibrated"], golden_only))
    assert result.activated and result.report.ok and "dataset" not in result.accuracy
    assert json.loads((bundles["miscalibrated"].path / MANIFEST).read_text())["dataset"]


def test_a_golden_reference_scores_the_quantized_model_itself(make_device, bundles):
    """`reference: golden`: the reference is the model the golden outputs come from — for the
    mis-calibrated build, its own (poor) quantized reference: the device reproduces it, so
    the gate passes; it measures the device's fidelity, not the quantization's cost."""
    from edgekit.api.build import BuildOptions, build
    folder = bundles["miscalibrated"].path.parent
    recipe = folder / "golden-ref.yaml"
    recipe.write_text((folder / "miscalibrated.yaml").read_text().replace(
        "metric: top1,", "metric: top1, reference: golden,"))
    bundle = build(BuildOptions(recipe=recipe, target="host", out=folder / "golden-ref")).bundle
    note = bundle.manifest.dataset
    assert note.reference == "golden" and note.reference_score < 0.5
    score = deploy_bundle(make_device(), bundle).accuracy["dataset"]
    assert abs(score["drop"]) <= 0.01, score
