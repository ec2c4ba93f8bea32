"""Fleet rollouts over devices that are directories here: waves, a failing device halting its
wave, rollback on halt, the latency gate, and a rollout killed mid-way then resumed."""

import shutil
from pathlib import Path

import pytest

from edgekit.config.fleet import load_fleet
from edgekit.device.deploy import release_id
from edgekit.fleet.journal import read_events
from edgekit.fleet.rollout import UpdateOptions, resume, update
from edgekit.fleet.status import fleet_status
from edgekit.models import events as ev
from tests.fixtures.rollouts import kill_update_after
from tests.local.conftest import APP, RECIPE, current_of

pytestmark = pytest.mark.local


def fleet_file(tmp_path, count: int, rollout: str = "", hooks: str = ""):
    """`count` local devices d1…dN (directories next to the fleet file), target host."""
    lines = ["devices:"]
    for i in range(1, count + 1):
        (tmp_path / "devices" / f"d{i}").mkdir(parents=True, exist_ok=True)
        lines.append(f"  d{i}: {{host: 'local:devices/d{i}', target: host}}")
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n" + (f"rollout: {rollout}\n" if rollout else "")
                    + hooks)
    return path


def roll(fleet, bundle, on_event=None, **policy):
    return update(UpdateOptions(fleet=fleet, recipe=RECIPE, policy=policy),
                  build_for=lambda target: bundle, on_event=on_event)


def root(tmp_path, name):
    return tmp_path / "devices" / name


def test_a_fleet_updates_in_waves_canary_first_and_reports_its_status(tmp_path, v1):
    fleet = fleet_file(tmp_path, 4, rollout="{canary: 1, waves: [50%, 100%]}")
    seen = []
    result = roll(fleet, v1, on_event=seen.append)
    assert result.status == "completed"
    assert [w.devices for w in result.waves] == [("d1",), ("d2", "d3"), ("d4",)]
    assert all(d.status == "updated" and d.previous is None for d in result.devices)
    assert all(current_of(root(tmp_path, f"d{i}")) == release_id(v1) for i in range(1, 5))
    kinds = [type(e) for e in seen]
    # the first wave's devices are reached and preflighted before the build; later waves'
    # devices are checked by their own deploys when their wave starts
    assert kinds[:3] == [ev.DevicePreflight, ev.BuildStarted, ev.RolloutStarted]
    assert seen[0].ok and seen[0].device == "d1" and kinds[-1] is ev.Finished
    assert kinds.count(ev.DeviceDone) == 4 and kinds.count(ev.WaveDone) == 3
    # each device: preflight before upload, validation before activation
    steps = [e.step for e in seen if isinstance(e, ev.DeviceStep) and e.device == "d2"]
    assert steps == ["preflight", "provision", "upload", "validate", "activate"]
    rows = fleet_status(load_fleet(fleet), APP)
    assert all(r.reachable and r.current == release_id(v1) and r.built_for == "host"
               and r.last_validation.ok for r in rows), rows


@pytest.mark.parametrize("scope", ["wave", "all"])
def test_an_unreachable_device_halts_its_wave_and_rollback_on_halt_restores_the_others(
        tmp_path, v1, v2, scope):
    fleet = fleet_file(tmp_path, 4, rollout="{canary: 1, waves: [100%], max_p90_ratio: null}")
    roll(fleet, v1)
    shutil.rmtree(root(tmp_path, "d3"))  # the device is gone
    result = roll(fleet, v2, rollback_on_halt=scope)
    assert result.status == "halted" and result.rolled_back == scope
    status = {d.device: d for d in result.devices}
    assert status["d3"].status == "failed" and status["d3"].failure == "DeviceUnreachable"
    assert status["d2"].status == status["d4"].status == "rolled-back"
    assert status["d1"].status == ("rolled-back" if scope == "all" else "updated")
    old, new = release_id(v1), release_id(v2)
    assert [current_of(root(tmp_path, n)) for n in ("d1", "d2", "d4")] == \
        [old if scope == "all" else new, old, old]
    assert result.waves[1].failed == 1 and result.waves[1].halted


def test_failures_within_max_fail_do_not_halt(tmp_path, v1):
    fleet = fleet_file(tmp_path, 3, rollout="{canary: 1, waves: [100%], max_fail: 1}")
    shutil.rmtree(root(tmp_path, "d2"))
    result = roll(fleet, v1)
    assert result.status == "completed"
    assert [d.status for d in result.devices] == ["updated", "failed", "updated"]


def test_a_failing_health_hook_fails_the_device_and_keeps_its_release(tmp_path, v1, v2):
    # the health check fails only where the device says it is unhealthy
    hooks = "hooks: {health: 'test ! -f \"$HOME/unhealthy\"'}\n"
    fleet = fleet_file(tmp_path, 2, rollout="{canary: 1, waves: [100%], max_p90_ratio: null}",
                       hooks=hooks)
    roll(fleet, v1)
    (root(tmp_path, "d2") / "unhealthy").touch()
    result = roll(fleet, v2)
    assert result.status == "halted"
    assert [(d.status, d.failure) for d in result.devices] == \
        [("updated", ""), ("failed", "HealthGateFailed")]
    assert current_of(root(tmp_path, "d2")) == release_id(v1)


def test_the_latency_gate_benchmarks_both_releases_on_the_device(tmp_path, v1, bundle_copy):
    from tests.local.conftest import set_manifest
    # the same module run another way (v2 of the recipe is the same module: only its samples
    # differ, and an identical module is not measured)
    other = bundle_copy(v1, lambda d: set_manifest(d, runtime_driver="local-sync"))
    fleet = fleet_file(tmp_path, 1, rollout="{max_p90_ratio: 20, gate_rounds: 2, "
                                            "gate_shared_cpus: true}")
    roll(fleet, v1)
    result = roll(fleet, other)
    device = result.devices[0]
    assert device.status == "updated", device.reason
    assert device.p90_before_ms > 0 and device.p90_after_ms > 0
    # the figure the gate decided on, its spread over the rounds and its limit are kept
    low, high = device.p90_ratio_range
    assert low <= device.p90_ratio <= high and device.p90_ratio_limit == 20


def test_a_killed_rollout_resumes_without_redoing_finished_devices(tmp_path, v1):
    fleet = fleet_file(tmp_path, 5, rollout="{canary: 1, waves: [1], concurrency: 1}",
                       hooks="hooks: {after_activate: 'sleep 0.5'}\n")
    directory = kill_update_after(2, fleet, RECIPE, cwd=tmp_path, timeout=120)
    events = read_events(directory)
    done_before = {e.device for e in events if isinstance(e, ev.DeviceDone)}
    assert 2 <= len(done_before) < 5
    release = release_id(v1)
    for name in ("d1", "d2", "d3", "d4", "d5"):  # on the old release or the new, nothing else
        assert current_of(root(tmp_path, name)) in (None, release)
        if name in done_before:
            assert current_of(root(tmp_path, name)) == release

    result = resume(directory.name)
    assert result.status == "completed"
    assert all(d.status == "updated" for d in result.devices)
    restarted = {e.device for e in read_events(directory)[len(events):]
                 if isinstance(e, ev.DeviceStarted)}
    assert restarted.isdisjoint(done_before) and len(restarted | done_before) == 5
    assert all(current_of(root(tmp_path, f"d{i}")) == release for i in range(1, 6))


def test_a_fleet_no_device_of_which_can_take_the_release_stops_before_building(tmp_path, v1):
    import os

    from edgekit.errors import ConfigError
    foreign = "rpi4" if os.uname().machine == "x86_64" else "host"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("devices:\n  gone: {host: 'local:devices/gone', target: host}\n"
                     f"  wrong: {{host: 'local:devices/wrong', target: {foreign}}}\n")
    (tmp_path / "devices" / "wrong").mkdir(parents=True)
    built, seen = [], []
    with pytest.raises(ConfigError, match="no device of the first wave can take the release"):
        update(UpdateOptions(fleet=fleet, recipe=RECIPE), on_event=seen.append,
               build_for=lambda target: built.append(target) or v1)
    assert built == [] and [e.ok for e in seen] == [False, False]
    assert f"target {foreign} builds" in seen[1].reason


def test_a_device_on_this_machines_cpus_is_not_gated_and_says_so(tmp_path, v1, v2):
    fleet = fleet_file(tmp_path, 2, rollout="{canary: 1, waves: [100%], max_p90_ratio: 1.01}")
    roll(fleet, v1)
    result = roll(fleet, v2)
    assert result.status == "completed"
    for device in result.devices:
        assert device.status == "updated" and device.p90_ratio is None
        assert "latency gate skipped: the device runs on this machine's CPUs" in device.reason


def test_a_module_identical_to_the_live_one_is_not_measured_by_the_gate(tmp_path, v1,
                                                                           bundle_copy):
    from tests.local.conftest import set_manifest
    # another release (a looser tolerance) of the very same module
    same_module = bundle_copy(v1, lambda d: set_manifest(d, tolerances={
        **v1.manifest.tolerances.model_dump(mode="json"), "atol": 0.0002}))
    assert release_id(same_module) != release_id(v1)
    fleet = fleet_file(tmp_path, 1, rollout="{max_p90_ratio: 1.01, gate_shared_cpus: true}")
    roll(fleet, v1)
    device = roll(fleet, same_module).devices[0]
    assert device.status == "updated" and device.p90_ratio is None
    assert "the module is byte for byte that of" in device.reason


def test_a_second_update_of_the_live_release_costs_each_device_one_check(tmp_path, v1):
    fleet = fleet_file(tmp_path, 3, rollout="{canary: 1, waves: [100%]}")
    roll(fleet, v1)
    seen = []
    result = roll(fleet, v1, on_event=seen.append)
    assert [d.status for d in result.devices] == ["unchanged"] * 3
    assert all(d.reason.startswith("already current") for d in result.devices)
    # no deploy step at all: nothing uploaded, validated or activated
    assert not [e for e in seen if isinstance(e, ev.DeviceStep)]
    # a device whose live copy was damaged is deployed again (repaired, re-validated)
    module = root(tmp_path, "d2") / ".edgekit/apps" / APP / "current" / "module.vmfb"
    module.write_bytes(b"damaged")
    result = roll(fleet, v1, on_event=seen.append)
    assert {d.device: d.reason.startswith("already current") for d in result.devices} == \
        {"d1": True, "d2": False, "d3": True}
    assert [e.device for e in seen if isinstance(e, ev.DeviceStep) and e.step == "validate"] \
        == ["d2"]
    # --revalidate deploys and validates every device again
    seen.clear()
    update(UpdateOptions(fleet=fleet, recipe=RECIPE, revalidate=True),
           build_for=lambda target: v1, on_event=seen.append)
    assert sorted(e.device for e in seen if isinstance(e, ev.DeviceStep)
                  and e.step == "validate") == ["d1", "d2", "d3"]


def test_a_journal_torn_by_a_crash_is_repaired_and_the_rollout_finishes(tmp_path, v1):
    from edgekit.fleet.journal import JOURNAL
    from edgekit.fleet.rollout import rollout_result
    fleet = fleet_file(tmp_path, 4, rollout="{canary: 1, waves: [1], concurrency: 1}",
                       hooks="hooks: {after_activate: 'sleep 0.3'}\n")
    directory = kill_update_after(2, fleet, RECIPE, cwd=tmp_path, timeout=120)
    journal = directory / JOURNAL
    data = journal.read_bytes()
    journal.write_bytes(data[:-15])         # what a crash in the middle of a write leaves
    seen = []
    result = resume(directory.name, on_event=seen.append)
    assert result.status == "completed", result
    assert all(d.status == "updated" for d in result.devices)
    assert all(current_of(root(tmp_path, f"d{i}")) == release_id(v1) for i in range(1, 5))
    # the torn bytes are set aside beside the journal, said once, never appended after
    repaired = [e for e in seen if isinstance(e, ev.JournalRepaired)]
    torn = data[:-15][data[:-15].rfind(b"\n") + 1:]
    assert len(repaired) == 1 and repaired[0].bytes == len(torn) > 0
    assert (directory / repaired[0].set_aside).read_bytes() == torn
    # every line reads back: the report and another resume attempt work
    assert len(read_events(directory)) == len(journal.read_text().splitlines())
    assert rollout_result(directory.name).status == "completed"


def test_an_older_build_is_refused_on_each_device_unless_the_rollout_allows_a_downgrade(
        tmp_path, v1, v2):
    assert v1.manifest.created_at < v2.manifest.created_at
    fleet = fleet_file(tmp_path, 2, rollout="{canary: 1, waves: [100%], max_p90_ratio: null}")
    roll(fleet, v2)
    result = roll(fleet, v1)
    assert result.status == "halted"
    refused = result.devices[0]
    assert refused.status == "failed" and refused.failure == "BundleError"
    assert "older than" in refused.reason
    assert current_of(root(tmp_path, "d1")) == release_id(v2)
    result = update(UpdateOptions(fleet=fleet, recipe=RECIPE, allow_downgrade=True),
                    build_for=lambda target: v1)
    assert result.status == "completed"
    assert all(current_of(root(tmp_path, f"d{i}")) == release_id(v1) for i in (1, 2))


def test_resuming_a_rollout_that_finished_runs_nothing_and_shows_its_result(tmp_path, v1,
                                                                            monkeypatch):
    import os
    import subprocess
    import sys
    done = roll(fleet_file(tmp_path, 2), v1)
    assert done.status == "completed"
    directory = tmp_path / "home" / "fleet" / done.id            # this test's rollouts only
    shutil.copytree(Path(done.journal).parent, directory)
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))
    journal = (directory / "journal.jsonl").read_bytes()
    seen = []
    again = resume(on_event=seen.append)              # README: `edgekit fleet resume`
    assert [type(e) for e in seen] == [ev.AlreadyFinished]
    assert (seen[0].rollout, seen[0].status) == (done.id, "completed")
    assert again.id == done.id and again.status == "completed"
    assert (directory / "journal.jsonl").read_bytes() == journal      # nothing run again
    cli = subprocess.run([sys.executable, "-m", "edgekit", "fleet", "resume"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "EDGEKIT_HOME": str(tmp_path / "home")})
    assert cli.returncode == 0, cli.stderr
    said = " ".join(cli.stderr.split())                 # wrapped at the terminal width
    assert f"rollout {done.id} had finished (completed): nothing to resume" in said
