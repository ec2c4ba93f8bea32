"""The exported Ansible playbook run by real `ansible-playbook` (ansible-core) against two lab
devices (real sshd on 127.0.0.x), one of which fails validation (a Vulkan module built for
Mali's valhall, run on llvmpipe: wrong numerics): what `edgekit deploy` journals on each
device (so `edgekit fleet status` shows the validation), and the halt (issue 34)."""

import json
import subprocess

import pytest
import yaml

from edgekit.lab import devices as lab
from tests.integration.helpers import edgekit

APP = "ansible-app"
RECIPE = ('name: ansible-app\nmodel:\n  python: "@TINY@:conv_mean"\n'
          'inputs: [{name: x, shape: [1, 3, 16, 16]}]\nseed: 0\n')


@pytest.fixture(scope="module")
def pair():
    devices = lab.up("x86_64", 2)
    yield devices
    lab.down([d.name for d in devices])


def fleet_file(tmp_path, devices, targets):
    lines = ["devices:", *(f"  {d.name}: {{target: {targets[d.name]}}}" for d in devices),
             # no canary: one device per wave, in this order
             "rollout: {canary: null, waves: [1], max_fail: 0}",
             "hooks: {after_activate: 'touch \"$HOME/hook-$EDGEKIT_RELEASE\"'}"]
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def export_and_run(fleet, recipe, out):
    proc = edgekit("fleet", "export-ansible", "--fleet", str(fleet), "--recipe", str(recipe),
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run(["ansible-playbook", "rollout.yml"], cwd=out, capture_output=True,
                         text=True, timeout=300)
    hosts = {}
    inventory = yaml.safe_load((out / "inventory.yml").read_text())
    for wave in inventory["all"]["children"]["edgekit_fleet"]["children"].values():
        hosts |= {name: v["edgekit_release"] for name, v in wave["hosts"].items()}
    return run, hosts


def current_of(device):
    link = device.host_path(f"{device.home}/.edgekit/apps/{APP}/current")
    return link.readlink().name if link.is_symlink() else None


def journal_of(device):
    path = device.host_path(f"{device.home}/.edgekit/apps/{APP}/journal.jsonl")
    lines = path.read_text().splitlines() if path.is_file() else []
    return [(e["event"], e["release"]) for e in map(json.loads, lines)]


def test_the_playbook_journals_validation_and_halts_on_a_device_that_fails_it(
        pair, write_recipe, tmp_path):
    good, bad = pair
    mali = tmp_path / "mali-unchecked.yaml"
    mali.write_text("extends: vulkan-generic\narch: x86_64\nvulkan:\n  target: valhall\n")
    targets = {good.name: "host", bad.name: str(mali)}
    recipe = write_recipe(RECIPE, name="ansible-app.yaml")
    out = tmp_path / "rollout"

    # the good device's wave first: deployed, validated, live; then the bad one's: rejected
    run, releases = export_and_run(fleet_file(tmp_path, [good, bad], targets), recipe, out)
    assert run.returncode != 0, run.stdout[-3000:]
    assert "compare with the golden outputs" in run.stdout
    assert current_of(good) == releases[good.name]
    assert journal_of(good) == [("validated", releases[good.name]),
                                ("activate", releases[good.name])]
    assert good.host_path(f"{good.home}/hook-{releases[good.name]}").is_file()
    assert current_of(bad) is None
    assert journal_of(bad) == [("rejected", releases[bad.name])]
    assert not bad.host_path(f"{bad.home}/.edgekit/apps/{APP}/releases/"
                             f"{releases[bad.name]}").exists()

    status = edgekit("fleet", "status", "--fleet", str(tmp_path / "fleet.yaml"), "--app", APP,
                     "--json")
    assert status.returncode == 0, status.stderr
    rows = {r["device"]: r for r in json.loads(status.stdout)}
    assert rows[good.name]["last_validation"]["ok"] is True
    assert rows[good.name]["last_validation"]["release"] == releases[good.name]
    assert rows[bad.name]["last_validation"]["ok"] is False

    # the bad device's wave first: it fails, the playbook halts, wave 2 never starts
    run, _ = export_and_run(fleet_file(tmp_path, [bad, good], targets), recipe, out)
    assert run.returncode != 0
    assert "wave 1 (1 device(s))" in run.stdout and "wave 2" not in run.stdout
    assert journal_of(bad)[-1] == ("rejected", releases[bad.name]) and current_of(bad) is None
    assert len(journal_of(good)) == 2 and current_of(good) == releases[good.name]
