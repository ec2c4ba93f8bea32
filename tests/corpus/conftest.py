import pytest

from edgekit.lab.rootfs import ensure_rootfs


@pytest.fixture(scope="session")
def arm64_userland():
    """The arm64 lab userland (built once per machine; as root) whose glibc runs the aarch64
    iree-run-module under qemu."""
    return ensure_rootfs()
