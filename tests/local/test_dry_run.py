"""`--dry-run` of deploy, rollback and fleet update on devices that are directories here: the
plan says what the real command then does (files, bytes, the switch), and the device's tree is
byte for byte what it was."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.api.deploy import DeployOptions
from edgekit.api.dry_run import deploy_dry_run, fleet_update_dry_run, rollback_dry_run
from edgekit.cli.main import cli
from edgekit.device.deploy import DeployPolicy, deploy_verified, plan_deploy, release_id
from edgekit.errors import DeviceIncompatible
from edgekit.fleet.rollout import UpdateOptions
from edgekit.toolchain.verified import verify
from tests.local.conftest import APP, RECIPE, current_of, set_manifest
from tests.local.test_fleet import fleet_file, roll

pytestmark = pytest.mark.local


def tree(root: Path) -> dict[str, object]:
    """Every entry under `root`: a file's bytes and mode, a link's target, a directory."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir", path.stat().st_mode)
        else:
            found[rel] = (path.read_bytes(), path.stat().st_mode)
    return found


def test_a_deploy_dry_run_changes_nothing_and_the_deploy_then_does_what_it_said(
        make_device, v1, v2):
    device = make_device()
    first = deploy_verified(device, verify(v1))
    before = tree(device.root)
    plan = plan_deploy(device, verify(v2))
    assert tree(device.root) == before
    assert (plan.previous, plan.release, plan.activate) == (first.release, release_id(v2), True)
    assert not plan.upload.present and not plan.provision and plan.samples == 3
    done = deploy_verified(device, verify(v2))
    assert (done.uploaded_files, done.uploaded_bytes) == (len(plan.upload.send),
                                                          plan.upload.send_bytes)
    assert current_of(device.root) == plan.release
    again = plan_deploy(device, verify(v2))
    assert again.upload.present and not again.activate


def test_files_the_device_has_already_are_copied_there_not_uploaded(make_device, v1,
                                                                    bundle_copy):
    device = make_device()
    deploy_verified(device, verify(v1))
    # the same module and goldens, checked more strictly: another release of the app
    stricter = bundle_copy(v1, lambda d: set_manifest(
        d, tolerances={**v1.manifest.tolerances.model_dump(mode="json"), "atol": 5e-5}))
    plan = plan_deploy(device, verify(stricter))
    assert {name for name, _, _ in plan.upload.reuse} == set(v1.manifest.files)
    assert {name for name, _ in plan.upload.send} == \
        {"manifest.json", "manifest.json.sig", "run.env", "SHA256SUMS"}
    done = deploy_verified(device, verify(stricter))
    module = (v1.path / "module.vmfb").stat().st_size
    assert done.activated and done.report.ok
    assert done.uploaded_bytes == plan.upload.send_bytes < module // 50
    assert done.copied_on_device == len(v1.manifest.files)


def test_a_dry_run_refuses_what_the_deploy_would_refuse(make_device, v1, bundle_copy):
    device = make_device()
    other = "aarch64" if os.uname().machine == "x86_64" else "x86_64"
    foreign = bundle_copy(v1, lambda d: set_manifest(d, arch=other))
    with pytest.raises(DeviceIncompatible, match=f"{other} code"):
        plan_deploy(device, verify(foreign), DeployPolicy())
    assert tree(device.root) == {}


def test_the_cli_dry_runs_a_deploy_and_a_rollback_without_touching_the_device(
        tmp_path, make_device, v1, v2):
    device = make_device()
    deploy_verified(device, verify(v1))
    second = deploy_verified(device, verify(v2))
    before = tree(device.root)
    runner = CliRunner()
    argv = ["deploy", str(v1.path), "--host", f"local:{device.root}", "--dry-run"]
    result = runner.invoke(cli, argv)     # v1 is older than the device's newest, v2
    assert result.exit_code == 6 and "is older than" in result.stderr
    result = runner.invoke(cli, [*argv, "--allow-downgrade", "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dry_run"] and data["plan"]["release"] == release_id(v1)
    assert data["plan"]["upload"]["present"] and data["plan"]["activate"]
    assert data["plan"]["downgrade"]
    result = runner.invoke(cli, ["rollback", f"local:{device.root}", "--app", APP,
                                 "--dry-run"])
    assert result.exit_code == 0, result.stderr
    assert f"from {second.release} to {release_id(v1)}; its files verify" in \
        " ".join(result.stdout.split())
    plan = rollback_dry_run(f"local:{device.root}", APP)
    assert (plan.current, plan.to, plan.verifies) == (second.release, release_id(v1), True)
    assert tree(device.root) == before


def test_a_recipe_dry_run_finds_the_cached_build_without_building(make_device, v1):
    device = make_device()
    result = deploy_dry_run(DeployOptions(host=f"local:{device.root}", recipe=RECIPE,
                                          target="host"))
    assert result.build.startswith("cache hit") and result.plan.release == release_id(v1)
    assert [(name, size) for name, size in result.plan.upload.send if name == "module.vmfb"] \
        == [("module.vmfb", (v1.path / "module.vmfb").stat().st_size)]
    assert tree(device.root) == {}


def test_a_fleet_dry_run_says_per_device_and_wave_what_the_update_would_do(tmp_path, v1):
    fleet = fleet_file(tmp_path, 3, rollout="{canary: 1, waves: [100%]}")
    roll(fleet, v1)
    damaged = tmp_path / "devices" / "d2" / ".edgekit/apps" / APP / "current" / "module.vmfb"
    damaged.write_bytes(b"damaged")
    before = {name: tree(tmp_path / "devices" / name) for name in ("d1", "d2", "d3")}
    plan = fleet_update_dry_run(UpdateOptions(fleet=fleet, recipe=RECIPE))
    assert [b.release for b in plan.builds] == [release_id(v1)]
    assert plan.waves == (("d1",), ("d2", "d3"))
    actions = {d.device: d.action for d in plan.devices}
    assert actions == {"d1": "unchanged", "d2": "deploy", "d3": "unchanged"}
    d2 = next(d for d in plan.devices if d.device == "d2")
    assert d2.plan.upload.repair and not d2.plan.activate
    assert {name: tree(tmp_path / "devices" / name) for name in before} == before


def test_a_device_copy_that_does_not_verify_is_replaced_by_an_upload(make_device, v1,
                                                                     bundle_copy):
    device = make_device()
    first = deploy_verified(device, verify(v1))
    live = device.root / ".edgekit/apps" / APP / "releases" / first.release / "module.vmfb"
    live.write_bytes(b"not the module its SHA256SUMS names")
    stricter = bundle_copy(v1, lambda d: set_manifest(
        d, tolerances={**v1.manifest.tolerances.model_dump(mode="json"), "atol": 5e-5}))
    assert "module.vmfb" in {name for name, _, _ in plan_deploy(device,
                                                                verify(stricter)).upload.reuse}
    done = deploy_verified(device, verify(stricter))
    assert done.activated and done.report.ok
    assert done.uploaded_bytes > (v1.path / "module.vmfb").stat().st_size
    assert not [p for p in (device.root / ".edgekit/apps" / APP).iterdir()
                if p.name.startswith(".")]   # no staging copy left behind


@pytest.mark.parametrize("lie", ["a SHA256SUMS over a megabyte", "a SHA256SUMS that is a link",
                                 "a module that is a link to /dev/zero"])
def test_another_release_whose_files_lie_costs_an_upload_not_the_deploy(make_device, v1,
                                                                         bundle_copy, lie):
    device = make_device()
    first = deploy_verified(device, verify(v1))
    other = device.root / ".edgekit/apps" / APP / "releases" / first.release
    sums = other / "SHA256SUMS"
    if lie == "a SHA256SUMS over a megabyte":
        sums.write_text(sums.read_text() * 20000)
    elif lie == "a SHA256SUMS that is a link":
        sums.rename(other / "elsewhere")
        os.symlink(other / "elsewhere", sums)
    else:
        (other / "module.vmfb").unlink()
        os.symlink("/dev/zero", other / "module.vmfb")
    stricter = bundle_copy(v1, lambda d: set_manifest(
        d, tolerances={**v1.manifest.tolerances.model_dump(mode="json"), "atol": 5e-5}))
    done = deploy_verified(device, verify(stricter))
    assert done.activated and done.report.ok
    assert done.uploaded_bytes > (v1.path / "module.vmfb").stat().st_size
