"""The dataset gate on a real lab device over SSH: the digits classifier (trained in the test)
built fp32 and int8 goes live on the x86_64 lab device with its score shown; the int8 build
calibrated on constant images is refused by the gate (its golden outputs pass). The aarch64
lab device (qemu: every run is emulated, ~20× slower) gates the fp32 rpi4 build on 32 images
always (the gate took 19 s there, the deploy 33 s, once, nice'd on a loaded 2-core host), and
takes all three rpi4 builds on 200 images when EDGEKIT_DATASET_ARM=1."""

import os

import pytest

from edgekit.api.releases import releases
from edgekit.device.deploy import deploy_bundle
from edgekit.errors import ValidationFailed
from edgekit.lab import devices as lab
from edgekit.transport import open_device
from tests.fixtures import digits


ARCHES = [("x86_64", "host")] + ([("aarch64", "rpi4")]
                                 if os.environ.get("EDGEKIT_DATASET_ARM") == "1" else [])


@pytest.fixture(scope="module", params=ARCHES, ids=[a for a, _ in ARCHES])
def lab_device(request, tmp_path_factory):
    arch, target = request.param
    name = f"acc-{arch.replace('_', '-')}"
    (device,) = lab.up(arch, 1, names=[name])
    yield device, digits.build_digits(tmp_path_factory.mktemp(f"digits-{arch}"), target)
    lab.down([name])


def test_the_digits_classifier_is_gated_on_a_lab_device(lab_device):
    device, bundles = lab_device
    with open_device(device.name) as conn:
        for name in ("fp32", "int8"):
            score = deploy_bundle(conn, bundles[name]).accuracy["dataset"]
            print(f"{device.name} {name}: top1 reference {score['reference_score']:.4f}, "
                  f"measured {score['measured']:.4f}, drop {score['drop']:.4f}")
            assert score["samples"] == digits.LIMIT and score["drop"] <= 0.01, score
        with pytest.raises(ValidationFailed) as err:
            deploy_bundle(conn, bundles["miscalibrated"])
        line = str(err.value).splitlines()[0]
        print(line)
        assert line.startswith("dataset gate: top1 reference 0.9") and device.address in line


def test_32_images_are_gated_on_the_aarch64_lab_device_and_shown_by_releases(
        arm_device, tmp_path):
    (bundle,) = digits.build_digits(tmp_path, "rpi4", names=("fp32",), limit=32).values()
    with open_device(arm_device.name) as conn:
        result = deploy_bundle(conn, bundle)
    score = result.accuracy["dataset"]
    print(f"{arm_device.name} fp32: top1 reference {score['reference_score']:.4f}, "
          f"measured {score['measured']:.4f}")
    assert result.activated and score["samples"] == 32 and score["drop"] <= 0.01, score
    (shown,) = [r for r in releases(arm_device.name, "digits").releases
                if r.release == result.release]
    assert shown.current and shown.dataset.measured == score["measured"]
    assert str(shown.dataset).startswith("top1 0.9")
