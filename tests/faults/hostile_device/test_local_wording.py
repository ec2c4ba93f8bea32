"""Wording that README promises, on `local:` devices too: a deploy that runs out of inodes
says so in README's words (issue 36, item 8)."""

import subprocess

import pytest

from edgekit.device.deploy import deploy_bundle
from edgekit.errors import RemoteCommandFailed


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
