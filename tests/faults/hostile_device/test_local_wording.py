"""Wording that README promises, on `local:` devices too: a deploy that runs out of inodes
says so in README's words (issue 36, item 8)."""

import subprocess

import pytest

from edgekit.device.deploy import deploy_bundle
from edgekit.errors import DeviceOutOfSpace, RemoteCommandFailed


@pytest.fixture
def tiny_apps(make_device):
    """A local device whose apps directory is a tmpfs of 12 inodes (unmounted afterwards)."""
    device = make_device()
    apps = device.root / ".edgekit" / "apps"
    apps.mkdir(parents=True)
    # the faults tier runs as root, as README says (its disk-full tests mount tmpfs too)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nr_inodes=12,size=64m", "tmpfs",
                    str(apps)], check=True)
    yield device
    subprocess.run(["umount", "-l", str(apps)], check=False)


def test_a_local_device_out_of_inodes_says_so_in_readmes_words(tiny_apps, v1):
    with pytest.raises(RemoteCommandFailed, match="no free inodes left on the device") as err:
        deploy_bundle(tiny_apps, v1)
    assert err.value.exit_code == 15 and "free space or inodes" in (err.value.hint or "")


@pytest.fixture
def full_disk(make_device):
    """A local device whose ~/.edgekit is a tmpfs of one page (unmounted afterwards)."""
    device = make_device()
    home = device.root / ".edgekit"
    home.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(home)], check=True)
    yield device
    subprocess.run(["umount", "-l", str(home)], check=False)


def test_a_device_without_room_is_refused_at_preflight_with_the_disk_full_exit_code(full_disk,
                                                                                     v1):
    with pytest.raises(DeviceOutOfSpace, match="MiB free under .edgekit; the upload needs") \
            as err:
        deploy_bundle(full_disk, v1)
    assert err.value.exit_code == RemoteCommandFailed.exit_code == 15   # as when it fills later
    assert err.value.hint.startswith("nothing was uploaded; free space on the device")
    assert not (full_disk.root / ".edgekit" / "apps").exists()
