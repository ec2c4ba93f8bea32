"""The fault-injection tier: real sshd lab devices with faults injected for real (a userspace
TCP proxy, a size-limited tmpfs, SIGKILL of edgekit mid-deploy, hostile hooks)."""

import pytest

from edgekit.lab import devices as lab


@pytest.fixture(scope="session")
def fault_device(isolated_edgekit_state):
    """One x86_64 lab device (a real OpenSSH server on 127.0.0.x) for the whole session."""
    device = lab.up("x86_64", 1)[0]
    yield device
    lab.down([device.name])
