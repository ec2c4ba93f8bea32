"""Lab devices for the device tier: one x86_64 (llvmpipe Vulkan) and one aarch64 (arm64
userland under qemu), started once per session and stopped at its end."""

import pytest

from edgekit.lab import devices as lab


@pytest.fixture(scope="session")
def lab_devices(isolated_edgekit_state):
    x86 = lab.up("x86_64", 1)[0]
    arm = lab.up("aarch64", 1)[0]
    yield {"x86_64": x86, "aarch64": arm}
    lab.down()


@pytest.fixture(scope="session")
def x86_device(lab_devices):
    return lab_devices["x86_64"]


@pytest.fixture(scope="session")
def arm_device(lab_devices):
    return lab_devices["aarch64"]
