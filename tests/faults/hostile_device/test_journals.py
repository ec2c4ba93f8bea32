"""A device's journal that lies or grows without end: read from its end with a cap; a line
edgekit did not write makes that device's `fleet status` row say so while the others work."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.config.fleet import load_fleet
from edgekit.device.deploy import deploy_bundle
from edgekit.device.releases import activation_history
from edgekit.fleet.status import fleet_status
from edgekit.transport.base import TAIL_MAX_BYTES
from tests.local.conftest import APP

REPO = Path(__file__).resolve().parents[3]


def journal(root: Path) -> Path:
    return root / ".edgekit" / "apps" / APP / "journal.jsonl"


def three_devices(tmp_path, make_device, v1):
    lines = ["devices:"]
    for name in ("d1", "d2", "d3"):
        device = make_device(name)
        deploy_bundle(device, v1)
        lines.append(f"  {name}: {{host: 'local:{device.root}', target: host}}")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("\n".join(lines) + "\n")
    return fleet, tmp_path / "devices"


@pytest.mark.parametrize("line", [
    {"ts": 1e20, "event": "validated", "release": "abc"},
    {"ts": 10 ** 20, "event": "validated", "release": "abc"},
    {"ts": 5, "event": "rejected", "release": "[/]\u001b[2J"},
    {"ts": -1, "event": "validated", "release": "abc"},
], ids=["float-1e20", "int-1e20", "markup-and-escape", "negative"])
def test_a_bad_journal_line_marks_its_device_row_and_the_others_work(tmp_path, make_device,
                                                                     v1, line):
    fleet, devices = three_devices(tmp_path, make_device, v1)
    with journal(devices / "d2").open("a") as f:
        f.write(json.dumps(line) + "\n")
    rows = {r.device: r for r in fleet_status(load_fleet(fleet), APP)}
    assert rows["d1"].last_validation.ok and rows["d3"].last_validation.ok
    assert rows["d2"].reachable and rows["d2"].current == rows["d1"].current
    assert "DeviceAnswerRefused" in rows["d2"].error and "did not write" in rows["d2"].error
    run = subprocess.run([sys.executable, "-m", "edgekit", "fleet", "status", "--fleet", str(fleet),
                          "--app", APP, "--wide"], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ,
                                           "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout and "refused answer" in run.stdout
    assert len(re.findall(r"\bok\b", run.stdout)) == 2, run.stdout


def test_a_gigabyte_journal_is_read_from_its_end_within_the_cap(make_device, v1,
                                                                peak_rss_kib):
    device = make_device()
    first = deploy_bundle(device, v1)
    path = journal(device.root)
    history = path.read_bytes()
    with path.open("r+b") as f:   # 1 GiB of junk before the real history (sparse: no disk)
        f.truncate(1 << 30)
        f.seek(1 << 30)
        f.write(b"\n" + history)
    before = peak_rss_kib()
    assert activation_history(device, APP) == [first.release]
    assert peak_rss_kib() - before < 4 * TAIL_MAX_BYTES // 1024 + 16 * 1024
