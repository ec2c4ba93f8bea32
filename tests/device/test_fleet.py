"""Fleet rollouts on 20 lab devices (16 x86_64, 4 aarch64 under qemu): waves, health gates,
max_fail, rollback on halt, unreachable devices, hooks, an interrupted rollout resumed."""

import json
import time

import pytest

from edgekit.fleet.journal import read_events
from edgekit.lab import devices as lab
from tests.fixtures.rollouts import kill_update_after
from tests.integration.helpers import edgekit

FLEET_APP = 'name: {name}\nmodel:\n  python: "@TINY@:{factory}"\n' \
    'inputs: [{{name: x, shape: {shape}}}]\nseed: {seed}\n'
SHAPES = {"conv_mean": "[1, 3, 16, 16]", "linear_softmax": "[2, 8]",
          "matmul_stack": "[128, 384]"}
TARGETS = {"x86_64": "host", "aarch64": "rpi4"}


@pytest.fixture(scope="module")
def twenty(lab_devices):
    """The session's two devices plus 18 more, mixed boards in inventory order."""
    extra = lab.up("x86_64", 14) + lab.up("aarch64", 3)
    x86 = [lab_devices["x86_64"], *[d for d in extra if d.arch == "x86_64"]]
    arm = [lab_devices["aarch64"], *[d for d in extra if d.arch == "aarch64"]]
    mixed = x86[:4] + arm[:2] + x86[4:10] + arm[2:] + x86[10:]
    mixed += lab.up("x86_64", 20 - len(mixed))
    yield mixed
    lab.down([d.name for d in extra] + [d.name for d in mixed[len(x86) + len(arm):]])


def x86_of(devices):
    return [d for d in devices if d.arch == "x86_64"]


def recipe(write_recipe, name, factory="conv_mean", seed=0, hooks=""):
    return write_recipe(FLEET_APP.format(name=name, factory=factory, shape=SHAPES[factory],
                                         seed=seed) + hooks, name=f"{name}-{seed}.yaml")


def fleet_file(tmp_path, devices, rollout="", targets=None, extra="", hooks=""):
    targets = targets or {}
    lines = ["devices:"]
    for d in devices:
        lines.append(f"  {d.name}: {{target: {targets.get(d.name, TARGETS[d.arch])}}}")
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n" + extra + (f"rollout: {rollout}\n" if rollout else "")
                    + hooks)
    return path


def current_of(device, app):
    link = device.host_path(f"{device.home}/.edgekit/apps/{app}/current")
    return link.readlink().name if link.is_symlink() else None


def update(fleet, recipe_path, *args):
    proc = edgekit("fleet", "update", "--fleet", str(fleet), "--recipe", str(recipe_path),
                   "--json", *args)
    assert proc.stdout, proc.stderr
    return proc, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def fleet_v1(twenty, tmp_path_factory):
    """App `fleet` v1 rolled out to all 20 devices (the clean rollout)."""
    import textwrap
    from tests.conftest import TINY
    folder = tmp_path_factory.mktemp("fleet-v1")
    path = folder / "fleet-0.yaml"
    path.write_text(textwrap.dedent(FLEET_APP.format(name="fleet", factory="conv_mean",
                                                     shape=SHAPES["conv_mean"], seed=0))
                    .replace("@TINY@", str(TINY)))
    fleet = fleet_file(folder, twenty, rollout="{canary: 1, waves: [25%, 100%], concurrency: 8}")
    started = time.perf_counter()
    proc, result = update(fleet, path, "--html", str(folder / "report.html"))
    return {"proc": proc, "result": result, "fleet": fleet, "folder": folder,
            "seconds": time.perf_counter() - started}


def test_a_mixed_fleet_of_twenty_updates_in_waves_and_reports(fleet_v1, twenty):
    proc, result = fleet_v1["proc"], fleet_v1["result"]
    assert proc.returncode == 0, proc.stderr
    assert result["status"] == "completed"
    # a canary per board (host and rpi4), then 25% of 20, then the rest
    assert [len(w["devices"]) for w in result["waves"]] == [2, 5, 13]
    assert {twenty[0].name, twenty[4].name} == set(result["waves"][0]["devices"])
    assert all(d["status"] == "updated" for d in result["devices"])
    releases = result["releases"]
    assert set(releases) == {"host", "rpi4"} and releases["host"] != releases["rpi4"]
    for device in twenty:
        assert current_of(device, "fleet") == releases[TARGETS[device.arch]], device.name
    html = (fleet_v1["folder"] / "report.html").read_text()
    assert html.count("<svg") >= 1 and result["id"] in html
    status = edgekit("fleet", "status", "--fleet", str(fleet_v1["fleet"]), "--app", "fleet",
                     "--json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert len(rows) == 20 and all(r["reachable"] for r in rows)
    assert all(r["current"] == releases[r["target"]] and r["last_validation"]["ok"]
               and r["runtime"] == "iree 3.13.0" for r in rows)
    print(f"\n20-device rollout: {fleet_v1['seconds']:.1f} s")


def test_a_bad_release_halts_after_the_canary_and_every_device_keeps_its_release(
        fleet_v1, twenty, write_recipe, tmp_path):
    # the x86 devices get a Valhall build the preflight check was told to skip: it validates
    # wrongly on llvmpipe; the Pi canary takes its (good) new release and is rolled back
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    targets = {d.name: str(tmp_path / "mali-unchecked.yaml")
               for d in twenty if d.arch == "x86_64"}
    before = {d.name: current_of(d, "fleet") for d in twenty}
    fleet = fleet_file(tmp_path, twenty, targets=targets,
                       rollout="{canary: 1, waves: [25%, 100%], max_p90_ratio: null}")
    proc, result = update(fleet, recipe(write_recipe, "fleet", seed=1), "--rollback-on-halt")
    assert proc.returncode == 17, proc.stderr
    assert result["status"] == "halted" and len(result["waves"]) == 1
    by_status = {}
    for d in result["devices"]:
        by_status.setdefault(d["status"], set()).add(d["device"])
    assert by_status["failed"] == {twenty[0].name}
    assert by_status["rolled-back"] == {twenty[4].name}
    assert len(by_status["skipped"]) == 18
    failed = next(d for d in result["devices"] if d["status"] == "failed")
    assert failed["failure"] == "ValidationFailed"
    assert {d.name: current_of(d, "fleet") for d in twenty} == before


def test_unreachable_devices_count_as_failed_and_max_fail_is_exceeded_not_equalled(
        twenty, write_recipe, tmp_path):
    devices = x86_of(twenty)[4:10]
    key = lab.identity_path()
    gone = "".join(f"  gone-{i}: {{host: 127.0.0.{249 + i}, port: 2222, user: nobody, "
                   f"identity: {key}, target: host}}\n" for i in (1, 2))
    app = recipe(write_recipe, "fleet-unreach", factory="linear_softmax")
    fleet = fleet_file(tmp_path, devices, extra=gone,
                       rollout="{canary: 1, waves: [100%], max_fail: 2}")
    proc, result = update(fleet, app)
    assert proc.returncode == 0, proc.stderr  # 2 failures allowed: equalled, not exceeded
    failed = {d["device"]: d for d in result["devices"] if d["status"] == "failed"}
    assert set(failed) == {"gone-1", "gone-2"}
    assert all(d["failure"] == "DeviceUnreachable" for d in failed.values())
    assert result["waves"][1]["failed"] == 2 and not result["waves"][1]["halted"]
    # one more failure than allowed halts, and `all` returns every updated device
    v2 = recipe(write_recipe, "fleet-unreach", factory="linear_softmax", seed=1)
    before = {d.name: current_of(d, "fleet-unreach") for d in devices}
    proc, result = update(fleet, v2, "--max-fail", "1", "--rollback-on-halt", "all",
                          "--max-p90-ratio", "0")
    assert proc.returncode == 17 and result["status"] == "halted"
    assert {d["status"] for d in result["devices"] if d["device"].startswith("lab-")} == \
        {"rolled-back"}
    assert {d.name: current_of(d, "fleet-unreach") for d in devices} == before


def test_the_latency_gate_catches_a_deliberately_slow_build(twenty, write_recipe, tmp_path):
    devices = x86_of(twenty)[10:12]
    (tmp_path / "x86-generic.yaml").write_text(
        "extends: host\ndescription: x86-64 baseline\ncpu:\n  cpu: generic\n")
    fast = recipe(write_recipe, "fleet-slow", factory="matmul_stack")
    proc, first = update(fleet_file(tmp_path, devices), fast)
    assert proc.returncode == 0, proc.stderr
    slow_targets = {d.name: str(tmp_path / "x86-generic.yaml") for d in devices}
    fleet = fleet_file(tmp_path, devices, targets=slow_targets,
                       rollout="{canary: 1, waves: [100%], max_p90_ratio: 1.5, "
                               "gate_shared_cpus: true}")   # lab devices: this machine's CPUs
    proc, result = update(fleet, fast, "--rollback-on-halt")
    assert proc.returncode == 17, proc.stderr
    canary = result["devices"][0]
    assert canary["status"] == "failed" and canary["failure"] == "HealthGateFailed"
    assert "latency gate" in canary["reason"]
    assert canary["p90_after_ms"] > 1.5 * canary["p90_before_ms"]
    assert result["devices"][1]["status"] == "skipped"
    assert [current_of(d, "fleet-slow") for d in devices] == \
        [first["releases"]["host"]] * 2


def test_hooks_run_after_activation_and_a_failing_health_check_rolls_the_device_back(
        twenty, write_recipe, tmp_path):
    device = x86_of(twenty)[12]
    marker = "touch \"$HOME/restarted-$EDGEKIT_RELEASE\""
    healthy = "test -f \"$EDGEKIT_RELEASE_DIR/module.vmfb\""
    hooks = f"hooks:\n  after_activate: '{marker}'\n  health: '{healthy}'\n"
    proc, first = update(fleet_file(tmp_path, [device], hooks=hooks),
                         recipe(write_recipe, "fleet-hooks", factory="linear_softmax"))
    assert proc.returncode == 0, proc.stderr
    release = first["releases"]["host"]
    assert device.host_path(f"{device.home}/restarted-{release}").is_file()
    unhealthy = "hooks:\n  health: 'echo model service down >&2; exit 3'\n"
    fleet = fleet_file(tmp_path, [device], hooks=unhealthy, rollout="{max_p90_ratio: null}")
    proc, result = update(fleet, recipe(write_recipe, "fleet-hooks", factory="linear_softmax",
                                        seed=1))
    assert proc.returncode == 17
    outcome = result["devices"][0]
    assert outcome["failure"] == "HealthGateFailed" and "model service down" in outcome["reason"]
    assert current_of(device, "fleet-hooks") == release


def test_a_killed_fleet_update_resumes_without_redoing_finished_devices(
        fleet_v1, twenty, write_recipe, tmp_path):
    fleet = fleet_file(tmp_path, twenty,
                       rollout="{canary: 1, waves: [3], concurrency: 2, max_p90_ratio: null}")
    v3 = recipe(write_recipe, "fleet", seed=3)
    before = {d.name: current_of(d, "fleet") for d in twenty}
    directory = kill_update_after(5, fleet, v3)
    events = read_events(directory)
    done_before = {e.device for e in events if e.event == "device-done"}
    assert 5 <= len(done_before) < 20
    releases = json.loads((directory / "plan.json").read_text())["releases"]
    # nothing half-switched: each device is on its old release or its new one, and every
    # device the journal calls done is on the new one
    for device in twenty:
        new = releases[TARGETS[device.arch]]
        assert current_of(device, "fleet") in (before[device.name], new), device.name
        if device.name in done_before:
            assert current_of(device, "fleet") == new, device.name

    resumed = edgekit("fleet", "resume", directory.name, "--json")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "completed"
    assert all(d["status"] == "updated" for d in result["devices"])
    after_resume = read_events(directory)[len(events):]
    restarted = {e.device for e in after_resume if e.event == "device-start"}
    assert restarted.isdisjoint(done_before) and len(restarted | done_before) == 20
    for device in twenty:
        assert current_of(device, "fleet") == releases[TARGETS[device.arch]], device.name
