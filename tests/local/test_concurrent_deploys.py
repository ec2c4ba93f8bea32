"""Two deploys from one working directory at once: each ships its own whole bundle, whatever
the other publishes to build/<app>-<target> meanwhile (issue 17, item 10). Real `edgekit`
processes, started together, several rounds (before the fix: round 0 failed, a good release
rejected by validation against the other build's golden outputs)."""

import json
import os
import subprocess
import sys
import threading

import pytest

from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.errors import RemoteCommandFailed
from edgekit.transport.local import LocalTransport
from tests.local.conftest import current_of, device_journal

pytestmark = pytest.mark.local

ROUNDS = 3


def start(*args: str, cwd) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "edgekit.cli.main", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


def test_two_deploys_of_one_app_from_one_directory_each_ship_their_own_bundle(tmp_path, v1,
                                                                              v2, recipes):
    # one app, two versions (other seed): both build to build/kws-mlp-host in this directory
    # (the session's builds: cache hits, so the two publish at the same moment)
    work = tmp_path / "work"
    work.mkdir()
    v2_recipe = recipes["v2"]
    expected = {"d1": release_id(v1), "d2": release_id(v2)}
    for round_ in range(ROUNDS):
        devices = {name: tmp_path / f"round{round_}" / name for name in expected}
        for root in devices.values():
            root.mkdir(parents=True)
        procs = {name: start("deploy", "--recipe", str(recipe), "--target", "host",
                             "--host", f"local:{devices[name]}", "--json", cwd=work)
                 for name, recipe in (("d1", recipes["v1"]), ("d2", v2_recipe))}
        results = {name: finish(proc) for name, proc in procs.items()}
        for name, (code, out, err) in results.items():
            assert code == 0, f"round {round_}, {name}: {err}"
            assert json.loads(out)["release"] == expected[name]
            assert current_of(devices[name]) == expected[name]
            assert [e for e, _ in device_journal(devices[name])].count("rejected") == 0


def test_two_identical_deploys_at_once_both_end_well(make_device, v1):
    """The same release from two deploys at once, each time to a fresh device: the deploy
    whose staging copy lands second keeps the first's verified copy (issue 36, item 8: it
    once ended "rename failed: Directory not empty")."""
    for round_ in range(4):
        device = make_device(f"same-{round_}")
        outcomes: list[str] = []

        def one() -> None:
            try:
                deploy_bundle(LocalTransport(device.root), v1)
                outcomes.append("ok")
            except RemoteCommandFailed as exc:   # README: the switch the other overtook
                outcomes.append("superseded" if "another deploy" in exc.what else str(exc))
        threads = [threading.Thread(target=one) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert set(outcomes) <= {"ok", "superseded"} and "ok" in outcomes, outcomes
        assert current_of(device.root) == release_id(v1)
