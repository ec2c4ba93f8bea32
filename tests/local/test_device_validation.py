"""On-device validation follows the host's rules: outputs fetched from the device are read as
the manifest's dtype (IREE's signless integers), dtypes and values are compared exactly for
integers, and a golden output whose dtype differs fails in one line."""

from pathlib import Path

import numpy as np
import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.device.deploy import deploy_bundle
from edgekit.errors import ValidationFailed
from tests.local.conftest import current_of, rehash

pytestmark = pytest.mark.local

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "validation_models.py"


@pytest.fixture(scope="module")
def uint8_bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uint8")
    recipe = folder / "add-uint8.yaml"
    recipe.write_text(f'name: add-uint8\nlowering: linalg\n'
                      f'model:\n  python: "{MODELS}:add_uint8"\n')
    return build(BuildOptions(recipe=recipe, target="host", out=folder / "bundle")).bundle


def test_a_uint8_output_validates_on_the_device_as_uint8(make_device, uint8_bundle):
    result = deploy_bundle(make_device(), uint8_bundle)
    first, mask = result.report.outputs
    assert result.report.ok and result.activated
    assert (first.dtype, first.limits, mask.dtype) == ("uint8", "exact (uint8: exact)", "bool")


def test_a_golden_output_of_another_width_fails_in_one_line(make_device, uint8_bundle,
                                                            bundle_copy):
    def widen(directory):
        golden = directory / "golden" / "output_0.npy"
        np.save(golden, np.load(golden).astype(np.int16))
        rehash(directory, "golden/output_0.npy")
    device = make_device()
    with pytest.raises(ValidationFailed) as err:
        deploy_bundle(device, bundle_copy(uint8_bundle, widen))
    assert err.value.report.outputs[0].problems == ("dtype uint8, expected int16",)
    assert current_of(device.root, "add-uint8") is None
