"""Tools come from the build cache only after their sha256 matches the toolchain's record (the
installed runtime package's files for this machine), and a cache others may write is refused
outright: a swapped iree-run-module never reaches a device (issue 36, item 7)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.config.paths import cache_root
from edgekit.device.deploy import deploy_bundle
from edgekit.device.provision import runtime_tools
from edgekit.errors import ConfigError
from edgekit.toolchain.versions import iree_runtime_version

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(cache))
    return cache


def test_a_swapped_tool_in_the_cache_is_refused_and_never_deployed(own_cache, make_device,
                                                                   v1):
    tools = runtime_tools("x86_64", iree_runtime_version())
    (tools / "iree-run-module").unlink()
    (tools / "iree-run-module").write_text("#!/bin/sh\necho owned > \"$HOME/owned\"\n")
    device = make_device()
    with pytest.raises(ConfigError, match="cached iree-run-module in .* differ from the "
                                          "toolchain's record"):
        deploy_bundle(device, v1)
    assert not (device.root / "owned").exists()
    assert not list((device.root / ".edgekit").glob("runtime/*/bin/iree-run-module"))


def test_a_cache_others_can_write_is_refused_in_one_line(own_cache, make_device, builds):
    runtime_tools("x86_64", iree_runtime_version())
    (own_cache / "runtime").chmod(0o777)
    device = make_device()
    run = subprocess.run([sys.executable, "-m", "edgekit", "deploy", str(builds["v1"]),
                          "--host", f"local:{device.root}"], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1 and "is writable by others (mode 777)" in lines[0], run.stderr
    assert cache_root() == own_cache
