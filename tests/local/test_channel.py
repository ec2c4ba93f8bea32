"""The pull path on `local:` devices: a channel published into a folder, served by a real
nginx (started here, as this user, on 127.0.0.20), devices running the real agent.sh (curl,
ssh-keygen -Y verify, install_bundle.sh) — its poll run directly instead of by the timer."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.channel.agent import AGENT_DIR, install_agent, poll
from edgekit.channel.index import INDEX, INDEX_SIG, bucket, parse_index
from edgekit.channel.publish import pause, promote, publish
from edgekit.channel.reports import read_reports
from edgekit.device.deploy import release_id
from edgekit.lab.nginx import Nginx
from tests.local.conftest import current_of, device_journal, rehash, releases_on

pytestmark = pytest.mark.local


@pytest.fixture
def site(tmp_path):
    """The channel folder (DIR) and an nginx serving it."""
    root = tmp_path / "site"
    root.mkdir()
    with Nginx(root, tmp_path / "nginx") as web:
        yield root, web


def agent_on(make_device, url, name):
    device = make_device(name)
    install_agent(device, url, name, timer="none")
    return device


def report_of(root, device_id, channel="stable"):
    return json.loads((root / channel / "status" / f"{device_id}.json").read_text())


def test_a_channel_updates_devices_and_moves_only_the_files_they_lack(make_device, v1, v2,
                                                                       site):
    root, web = site
    publish(v1.path, root / "stable")
    url = f"{web.url}/stable"
    a, b = agent_on(make_device, url, "dev-a"), agent_on(make_device, url, "dev-b")
    for device in (a, b):
        code, err = poll(device)
        assert code == 0, err
        assert current_of(device.root) == release_id(v1)
        assert device_journal(device.root) == [("validated", release_id(v1)),
                                               ("activate", release_id(v1))]
    first = report_of(root, "dev-a")
    assert first["state"] == "updated" and first["current"] == release_id(v1)
    # a second poll: nothing to do, nothing fetched but the index
    before = len(web.log_lines())
    assert poll(a)[0] == 0 and report_of(root, "dev-a")["state"] == "current"
    assert {line[1].rsplit("/", 1)[-1] for line in web.log_lines()[before:]
            if line[0] == "GET"} == {INDEX, INDEX_SIG}
    change = publish(v2.path, root / "stable")
    moved = sum(f.size for f in change.index.files
                if f.sha256 in {g.sha256 for g in change.index.files} - {
                    g.sha256 for g in change.previous.files})
    assert poll(a)[0] == 0 and current_of(a.root) == release_id(v2)
    got = report_of(root, "dev-a")["bytes"]
    assert got == moved < change.index.total_bytes        # the golden inputs stayed
    # the reports, read from the folder and over HTTP alike (untrusted: parsed strictly)
    by_dir = {r.device: r for r in read_reports(root / "stable")}
    by_url = {r.device: r for r in read_reports(url)}
    assert by_dir == by_url
    assert by_dir["dev-a"].current == release_id(v2) and by_dir["dev-b"].current == \
        release_id(v1)


def test_phased_promotion_pauses_itself_when_a_device_fails_validation(
        make_device, v1, v2, bundle_copy, site):
    def corrupt(directory):
        golden = directory / "golden" / "output_0.npy"
        np.save(golden, np.load(golden) * 2.0 + 1.0)
        rehash(directory, "golden/output_0.npy")
    root, web = site
    url = f"{web.url}/stable"
    publish(v1.path, root / "stable")
    devices = {n: agent_on(make_device, url, n) for n in ("d1", "d2", "d3", "d4")}
    for device in devices.values():
        assert poll(device)[0] == 0
    bad = bundle_copy(v2, corrupt)
    release = release_id(bad)
    # a seed that puts exactly one device under 10 %, and two under 50 %
    seed = next(s for s in (f"{i:016x}" for i in range(100000))
                if sorted(bucket(s, n, release) // 100 for n in devices)[:3][0] < 10
                <= sorted(bucket(s, n, release) // 100 for n in devices)[1] < 50
                <= sorted(bucket(s, n, release) // 100 for n in devices)[2])
    order = sorted(devices, key=lambda n: bucket(seed, n, release))
    publish(bad.path, root / "stable", steps=(10, 50, 100), max_fail="0", seed=seed)
    for name, device in devices.items():
        code, err = poll(device)
        state = report_of(root, name)["state"]
        if name == order[0]:
            assert code == 1 and state == "failed" and "max abs error" in err
        else:
            assert code == 0 and state == "waiting"
        assert current_of(device.root) == release_id(v1)     # rolled back / untouched
    first = devices[order[0]]
    assert device_journal(first.root)[-1] == ("rejected", release)
    assert releases_on(first.root) == {release_id(v1)}
    # the controller reads the reports: one failure > max-fail 0 → paused, not raised
    change = promote(root / "stable")
    assert change.action == "paused" and "1 of 1 device(s) failed" in change.reason
    index = parse_index((root / "stable" / INDEX).read_text(), "index")
    assert index.paused and index.percent == 10
    for name in order[1:]:
        assert poll(devices[name])[0] == 0 and report_of(root, name)["state"] == "paused"
    # a failed release is not retried by the device that failed it
    assert poll(first)[0] == 0 and report_of(root, order[0])["state"] == "failed"


def test_promotion_walks_the_steps_while_devices_succeed(make_device, v1, v2, site):
    root, web = site
    url = f"{web.url}/stable"
    names = [f"p{i}" for i in range(6)]
    devices = {n: agent_on(make_device, url, n) for n in names}
    change = publish(v1.path, root / "stable", steps=(10, 50, 100), max_fail="5%")
    assert change.index.percent == 10
    for step in (10, 50, 100):
        for device in devices.values():
            assert poll(device)[0] == 0
        index = parse_index((root / "stable" / INDEX).read_text(), "index")
        updated = {n for n in names if current_of(devices[n].root) == release_id(v1)}
        expected = {n for n in names
                    if bucket(index.seed, n, index.release) < step * 100}
        assert updated == expected
        result = promote(root / "stable")
        assert result.action == ("complete" if step == 100 else "raised")
    assert all(current_of(d.root) == release_id(v1) for d in devices.values())


def test_a_tampered_index_or_file_or_an_unknown_signer_is_refused_with_nothing_staged(
        make_device, v1, site, tmp_path):
    root, web = site
    publish(v1.path, root / "stable")
    device = agent_on(make_device, f"{web.url}/stable", "dev")
    index = root / "stable" / INDEX
    good = index.read_text()

    def refused(match):
        code, err = poll(device)
        assert code == 1 and match in err, err
        assert report_of(root, "dev")["state"] == "refused"
        assert releases_on(device.root) == set() and current_of(device.root) is None
    index.write_text(good.replace("max_fail 0", "max_fail 100%"))
    refused("does not match its signature")
    # signed by a key the device does not trust
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    index.write_text(good)
    (root / "stable" / INDEX_SIG).unlink()
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(stranger), "-n",
                    "edgekit-bundle", str(index)], check=True)
    refused("signed by a key that is not in")
    # a blob changed on the server (the index is genuine)
    publish(v1.path, root / "stable")
    module = next(f for f in parse_index(index.read_text(), "i").files
                  if f.path == "module.vmfb")
    blob = root / "blobs" / module.sha256
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 1
    blob.write_bytes(bytes(data))
    refused("does not match its sha256: nothing was staged")
    assert not list((device.root / AGENT_DIR / "blobs").glob(module.sha256 + "*"))


def test_an_old_index_replayed_is_refused(make_device, v1, v2, site, tmp_path):
    root, web = site
    publish(v1.path, root / "stable")
    saved = {n: (root / "stable" / n).read_bytes() for n in (INDEX, INDEX_SIG)}
    publish(v2.path, root / "stable")
    device = agent_on(make_device, f"{web.url}/stable", "dev")
    assert poll(device)[0] == 0 and current_of(device.root) == release_id(v2)
    for name, data in saved.items():
        (root / "stable" / name).write_bytes(data)
    code, err = poll(device)
    assert code == 1 and "older than the newest accepted" in err
    assert current_of(device.root) == release_id(v2)


def test_an_offline_device_catches_up_on_its_next_poll(make_device, v1, v2, site):
    root, web = site
    url = f"{web.url}/stable"
    publish(v1.path, root / "stable")
    online, offline = agent_on(make_device, url, "on"), agent_on(make_device, url, "off")
    assert poll(online)[0] == 0 and poll(offline)[0] == 0
    # offline: its channel URL points where no server answers, for the whole rollout
    conf = offline.root / AGENT_DIR / "config"
    saved = conf.read_text()
    conf.write_text(saved.replace(web.url, "http://127.0.0.21:9"))
    publish(v2.path, root / "stable", steps=(50, 100))
    for _ in range(2):
        assert poll(online)[0] == 0
        code, err = poll(offline)
        assert code == 1 and "cannot be reached" in err
        promote(root / "stable")
    assert current_of(online.root) == release_id(v2)
    assert current_of(offline.root) == release_id(v1)
    conf.write_text(saved)
    assert poll(offline)[0] == 0 and current_of(offline.root) == release_id(v2)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("fetcher", ["curl", "wget"])
def test_a_download_cut_midway_resumes_on_the_next_poll(make_device, v1, tmp_path, fetcher):
    root = tmp_path / "slow-site"
    root.mkdir()
    change = publish(v1.path, root / "stable")
    module = next(f for f in change.index.files if f.path == "module.vmfb")
    with Nginx(root, tmp_path / "nginx", blob_rate="40k") as web:
        device = agent_on(make_device, f"{web.url}/stable", "dev")
        conf = device.root / AGENT_DIR / "config"
        conf.write_text(conf.read_text() + f"fetch {fetcher}\n")
        part = device.root / ".edgekit" / "agent" / "blobs" / f"{module.sha256}.part"
        agent = subprocess.Popen(["sh", str(device.root / AGENT_DIR / "agent.sh"), "poll"],
                                 cwd=device.root, env={**os.environ, "HOME": str(device.root)},
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (part.is_file() and part.stat().st_size > 20_000):
            assert time.monotonic() < deadline and agent.poll() is None
            time.sleep(0.05)
        fetching = [p for p in _children(agent.pid)
                    if fetcher.encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert fetching
        for pid in fetching:    # the connection is cut: the download dies mid-transfer
            os.kill(pid, signal.SIGKILL)
        _, err = agent.communicate(timeout=60)
        assert agent.returncode == 1 and "resumed next poll" in err
        kept = part.stat().st_size
        assert 0 < kept < module.size
        code, err = poll(device)
        assert code == 0, err
        assert current_of(device.root) == release_id(v1)
        ranged = [ln for ln in web.log_lines() if ln[1] == f"/blobs/{module.sha256}"]
        assert ranged[-1][2] == "206" and int(ranged[-1][3]) == module.size - kept
        assert report_of(root, "dev")["state"] == "updated"     # the report's PUT too


def test_dry_run_changes_nothing(v1, tmp_path, make_device):
    channel = tmp_path / "site" / "stable"
    change = publish(v1.path, channel, dry_run=True)
    assert change.dry_run and change.new_blobs and not channel.exists()
    publish(v1.path, channel)
    before = {p: p.read_bytes() for p in channel.rglob("*") if p.is_file()}
    assert promote(channel, dry_run=True).dry_run
    assert pause(channel, dry_run=True).action == "paused"
    assert {p: p.read_bytes() for p in channel.rglob("*") if p.is_file()} == before
    device = make_device("dry")
    plan = install_agent(device, "http://127.0.0.20:8080/stable", "dry", timer="none",
                         dry_run=True)
    assert plan.dry_run and "device dry" in plan.config
    # the probe makes the (empty) root to measure its free space; nothing is installed
    assert not [p for p in device.root.rglob("*") if p.is_file()]
    shutil.rmtree(channel)


def test_the_commands_end_to_end(v1, site, tmp_path):
    from click.testing import CliRunner

    from edgekit.cli.main import cli
    root, web = site
    run = CliRunner().invoke
    channel = str(root / "stable")
    bad = run(cli, ["channel", "publish", str(v1.path), "--channel", channel,
                    "--percent", "50,10"])
    assert bad.exit_code == 2 and "--percent steps must rise" in bad.output
    assert len(bad.output.strip().splitlines()) == 1
    dry = run(cli, ["channel", "publish", str(v1.path), "--channel", channel, "--dry-run"])
    assert dry.exit_code == 0 and "would be published" in dry.output
    assert not (root / "stable").exists()
    done = run(cli, ["channel", "publish", str(v1.path), "--channel", channel,
                     "--percent", "10,100", "--max-fail", "5%", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["index"]["percent"] == 10
    device = tmp_path / "dev-cli"
    device.mkdir()
    installed = run(cli, ["agent", "install", f"local:{device}", "--channel",
                          f"{web.url}/stable", "--device-id", "cli-1", "--timer", "none"])
    assert installed.exit_code == 0, installed.output
    assert "installed the agent as cli-1" in installed.output
    polled = run(cli, ["agent", "poll", f"local:{device}"])
    assert polled.exit_code == 0, polled.output
    promoted = run(cli, ["channel", "promote", "--channel", channel])
    assert promoted.exit_code == 0 and "raised" in promoted.output and "100%" in \
        promoted.output
    for args in (["channel", "status", "--channel", channel, "--json"],
                 ["fleet", "status", "--channel", f"{web.url}/stable", "--json"]):
        shown = run(cli, args)
        assert shown.exit_code == 0, shown.output
        reports = {r["device"]: r for r in json.loads(shown.output)["reports"]}
        assert reports["cli-1"]["state"] in ("updated", "waiting")
    paused = run(cli, ["channel", "pause", "--channel", channel])
    assert paused.exit_code == 0 and "paused" in paused.output
