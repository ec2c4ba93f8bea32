"""What deploy, rollback and pruning guarantee about the releases on a device: a hook that
hangs is killed and rolled back, a live release directory is never removed, a corrupted
release never goes live, and what a dead deploy left behind is removed by the next one."""

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from edgekit.config.recipe import Hooks
from edgekit.device.bench import BenchOptions, run_bench
from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.device.layout import shims_dir
from edgekit.device.provision import shim_version
from edgekit.device.releases import activate, prune_releases, rollback
from edgekit.errors import HealthGateFailed, RemoteCommandFailed
from edgekit.fleet.rollout import UpdateOptions, update
from tests.fixtures.cli import edgekit_here
from tests.fixtures.killable import edgekit_to_kill
from tests.local.conftest import APP, RECIPE, current_of, device_journal, releases_on, set_manifest

pytestmark = pytest.mark.local

SHIMS = shims_dir(shim_version())


def app_dir(device):
    return device.root / ".edgekit" / "apps" / APP


def release_path(device, release):
    return app_dir(device) / "releases" / release


def corrupt(device, release, name="module.vmfb"):
    with (release_path(device, release) / name).open("ab") as f:
        f.write(b"\0corrupted")


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def scratch_owner_of(pid: int) -> str:
    """A scratch owner tag as a deploy in process `pid` on this host writes it."""
    return f"{hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]}-{pid}"


def group_alive(pgid: int) -> bool:
    """A member of the process group still runs. Killed members are zombies until PID 1 reaps
    them, which this machine's init does late (seconds): they are not alive."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            return True
    return False


# --- hooks ------------------------------------------------------------------------------------

def test_a_health_hook_that_times_out_is_a_failed_hook_and_its_process_group_is_killed(
        make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    hooks = Hooks(health='echo $$ > "$HOME/hook.pgid"; sleep 100000 & sleep 100000',
                  timeout_s=1)
    with pytest.raises(HealthGateFailed, match="health hook did not finish within 1 s") as err:
        deploy_bundle(device, v2, hooks=hooks)
    assert f"`current` is back on {first.release}" in err.value.what
    assert err.value.exit_code == 16
    assert current_of(device.root) == first.release
    assert not group_alive(int((device.root / "hook.pgid").read_text()))
    assert ("health-failed", release_id(v2)) in device_journal(device.root)
    assert device_journal(device.root)[-1] == ("rollback", first.release)


def test_a_hook_that_exits_in_time_keeps_what_it_started_in_the_background(make_device, v1):
    device = make_device()
    hooks = Hooks(after_activate='sleep 30 >/dev/null 2>&1 & echo $! > "$HOME/service.pid"',
                  timeout_s=5)
    deploy_bundle(device, v1, hooks=hooks)
    service = int((device.root / "service.pid").read_text())
    try:
        os.kill(service, 0)  # still running: a restarted service is not the hook's to kill
    finally:
        os.kill(service, 9)


def fleet_of(tmp_path, names, hooks):
    lines = ["devices:"]
    for name in names:
        (tmp_path / "devices" / name).mkdir(parents=True, exist_ok=True)
        lines.append(f"  {name}: {{host: 'local:devices/{name}', target: host}}")
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\nrollout: {max_p90_ratio: null}\n" + hooks)
    return path


def roll(fleet, bundle, **policy):
    return update(UpdateOptions(fleet=fleet, recipe=RECIPE, policy=policy),
                  build_for=lambda target: bundle)


def test_in_a_fleet_a_timed_out_hook_fails_the_device_on_its_previous_release(tmp_path, v1,
                                                                               v2):
    roll(fleet_of(tmp_path, ["d1"], ""), v1)
    fleet = fleet_of(tmp_path, ["d1"], "hooks: {health: 'sleep 100000', timeout_s: 1}\n")
    result = roll(fleet, v2, rollback_on_halt="wave")
    assert result.status == "halted"
    (device,) = result.devices
    assert (device.status, device.failure) == ("failed", "HealthGateFailed")
    assert "did not finish within 1 s" in device.reason
    assert current_of(tmp_path / "devices" / "d1") == release_id(v1)


def test_rollback_on_halt_does_not_skip_a_failed_device_left_on_the_new_release(tmp_path, v1,
                                                                                  v2):
    roll(fleet_of(tmp_path, ["d1"], ""), v1)
    old = release_id(v1)
    # the hook fails and corrupts the previous release: the device's own restore refuses it
    module = f'"$HOME/.edgekit/apps/$EDGEKIT_APP/releases/{old}/module.vmfb"'
    fleet = fleet_of(tmp_path, ["d1"], f"hooks: {{health: 'printf x >> {module}; exit 1'}}\n")
    result = roll(fleet, v2, rollback_on_halt="wave")
    (device,) = result.devices
    # checked and tried again after the halt, not skipped as "failed": and told as it is
    assert device.status == "rollback-failed", device
    assert "sha256 mismatch" in device.reason and old in device.reason
    assert current_of(tmp_path / "devices" / "d1") == release_id(v2)


# --- existing and corrupted releases ----------------------------------------------------------

def test_redeploying_the_corrupted_current_release_repairs_it_in_place(make_device, v1):
    device = make_device()
    first = deploy_bundle(device, v1)
    inode = release_path(device, first.release).stat().st_ino
    corrupt(device, first.release)
    again = deploy_bundle(device, v1)
    assert again.report.ok and again.uploaded_files > 0 and not again.activated
    # the directory `current` points at was never removed or replaced
    assert release_path(device, first.release).stat().st_ino == inode
    assert current_of(device.root) == first.release
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"],
                          cwd=release_path(device, first.release)).returncode == 0
    assert not [p for p in app_dir(device).iterdir() if p.name.startswith(".")]


def test_a_corrupted_release_that_is_not_live_is_replaced_by_a_fresh_copy(make_device, v1, v2,
                                                                          bundle_copy):
    device = make_device()
    v3 = bundle_copy(v1, lambda d: set_manifest(d, runtime_driver="local-sync",
                                                created_at="2100-01-01T00:00:00+00:00"))
    first = deploy_bundle(device, v1)
    deploy_bundle(device, v2)
    deploy_bundle(device, v3)   # current v3, rollback target v2: v1 is history
    corrupt(device, first.release)
    again = deploy_bundle(device, v1, allow_downgrade=True)   # v1 is older than v2 and v3
    assert again.report.ok and again.activated and again.uploaded_files > 0
    assert current_of(device.root) == first.release
    assert not [p for p in app_dir(device).iterdir() if p.name.startswith(".")]


def test_rollback_refuses_a_corrupted_target_and_leaves_current(make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    second = deploy_bundle(device, v2)
    corrupt(device, first.release)
    with pytest.raises(RemoteCommandFailed, match="sha256 mismatch: module.vmfb: FAILED"):
        rollback(device, APP, SHIMS)
    assert current_of(device.root) == second.release


def test_the_cli_refuses_a_corrupted_rollback_with_exit_15_and_one_line(make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    second = deploy_bundle(device, v2)
    corrupt(device, first.release)
    proc = edgekit_here("rollback", f"local:{device.root}", "--app", APP)
    assert proc.returncode == 15, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "sha256 mismatch" in proc.stderr.splitlines()[0]
    assert current_of(device.root) == second.release


def test_corruption_inside_current_shows_as_a_sha256_mismatch_before_a_bench(make_device, v1):
    device = make_device()
    first = deploy_bundle(device, v1)
    corrupt(device, first.release)
    with pytest.raises(RemoteCommandFailed, match="sha256 mismatch"):
        run_bench(BenchOptions(hosts=(f"local:{device.root}",), app=APP, repetitions=2,
                               rounds=1, warmup=0))


# --- leftovers and pruning --------------------------------------------------------------------

def test_a_deploy_removes_what_dead_deploys_left_and_nothing_else(make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    apps = device.root / ".edgekit" / "apps"
    dead, me = scratch_owner_of(dead_pid()), scratch_owner_of(os.getpid())
    leftovers = [f".staging-{dead}-0001", f".validation-{dead}-0002", f".trash-{dead}-0003",
                 ".staging-0123456789ab"]            # an older edgekit's name
    for name in leftovers:
        (apps / APP / name / "golden").mkdir(parents=True)
    (apps / APP / f".inflight-{dead}-abandoned").touch()
    # a never-activated release of a dead deploy, another of a running one
    shutil.copytree(release_path(device, first.release), apps / APP / "releases" / "abandoned")
    shutil.copytree(release_path(device, first.release), apps / APP / "releases" / "uploading")
    (apps / APP / f".inflight-{me}-uploading").touch()
    running = apps / APP / f".staging-{me}-0004"
    running.mkdir()
    other_app = apps / "other-app" / f".staging-{dead}-0005"
    other_app.mkdir(parents=True)

    second = deploy_bundle(device, v2)
    names = {p.name for p in (apps / APP).iterdir()}
    assert not names & {*leftovers, f".inflight-{dead}-abandoned"}
    assert releases_on(device.root) == {first.release, second.release, "uploading"}
    assert running.is_dir() and other_app.is_dir()


def test_pruning_keeps_the_newest_activated_releases_not_never_activated_ones(make_device, v1):
    device = make_device()
    first = deploy_bundle(device, v1)
    releases = app_dir(device) / "releases"
    for name in ("a", "b", "c"):
        shutil.copytree(releases / first.release, releases / name)
        activate(device, APP, name, SHIMS)
    for name in ("never1", "never2"):   # newer on disk, never live
        shutil.copytree(releases / first.release, releases / name)
    # live before: first, a, b, c (current); rollback target b
    assert prune_releases(device, APP, keep=3) == (first.release,)
    assert releases_on(device.root) == {"a", "b", "c", "never1", "never2"}


def test_a_deploy_killed_during_validation_leaves_current_and_the_next_one_cleans_up(
        builds, make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    with edgekit_to_kill("deploy", str(builds["v2"]), "--host", f"local:{device.root}",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not any(
                p.name.startswith(".validation-") for p in app_dir(device).iterdir()):
            time.sleep(0.002)
    assert proc.returncode == -9   # killed mid-deploy, not finished
    assert current_of(device.root) == first.release
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"],
                          cwd=release_path(device, first.release)).returncode == 0
    deploy_bundle(device, v2)
    assert not [p.name for p in app_dir(device).iterdir() if p.name.startswith(".")]
    assert releases_on(device.root) == {first.release, release_id(v2)}
    assert device_journal(device.root)[-1] == ("activate", release_id(v2))
