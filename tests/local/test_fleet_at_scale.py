"""A fleet of fifty `local:` devices under CPU load (the scale tier: seconds, where the local
tier's budget is a minute for all of it; the 10,000-device run is bench/fleet_scale.py)."""

import shutil
import subprocess
import sys

import pytest

from edgekit.device.deploy import release_id
from tests.local.test_fleet import fleet_file, roll, root

pytestmark = pytest.mark.scale


def test_an_identical_rebuild_to_fifty_devices_under_load_never_halts_on_latency(tmp_path, v1,
                                                                                  v2):
    assert v1.manifest.files["module.vmfb"] == v2.manifest.files["module.vmfb"]
    assert release_id(v1) != release_id(v2)     # a rebuild: other samples, the same module
    # v1 live on the fifty: rolled out to one, whose directory the others copy (fifty
    # deploys with their validations cost seconds and are not what this test is about)
    roll(fleet_file(tmp_path, 1), v1, max_p90_ratio=None)
    for i in range(2, 51):
        shutil.copytree(root(tmp_path, "d1"), root(tmp_path, f"d{i}"), symlinks=True)
    fleet = fleet_file(tmp_path, 50, rollout="{canary: 1, waves: [10%, 50%, 100%], "
                                             "concurrency: 8, gate_shared_cpus: true}")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        result = roll(fleet, v2)           # the default gate, ×1.25, on every device
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert result.status == "completed", result.halt_reason
    assert all(d.status == "updated" for d in result.devices)
    assert all("the module is byte for byte that of" in d.reason for d in result.devices)
