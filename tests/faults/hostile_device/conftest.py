"""A device whose tools, shims and files lie: the controller bounds and checks everything it
reads back. Mostly `local:` devices (the same shims and transport code paths as a real device
but SSH), so the tier runs in seconds; SFTP's own path is checked on the sshd lab device."""

import os
import stat
from pathlib import Path

import pytest

from tests.local.conftest import builds, bundle_copy, make_device, recipes, v1, v2  # noqa: F401

pytestmark = pytest.mark.faults


def runtime_tool(root: Path, tool: str = "iree-run-module") -> Path:
    """The device's provisioned IREE tool (after a first deploy)."""
    found = list((root / ".edgekit" / "runtime").glob(f"*/bin/{tool}"))
    assert len(found) == 1, found
    return found[0]


def replace_tool(root: Path, script: str, tool: str = "iree-run-module") -> None:
    """Make the device's tool a shell script (the compromised device)."""
    path = runtime_tool(root, tool)
    path.unlink()
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def outputs_loop(body: str) -> str:
    """A script that runs `body` with $f set to each --output=@FILE it is given."""
    return ('for a in "$@"; do case $a in --output=@*) f=${a#--output=@}; '
            + body + ' ;; esac; done\n')


@pytest.fixture
def peak_rss_kib():
    """The process's peak RSS (VmHWM) so far, in KiB."""
    def read() -> int:
        for line in Path(f"/proc/{os.getpid()}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0
    return read
