"""Network faults, injected for real between edgekit and a real sshd lab device (tests/faults/
proxy.py): a cut or a stall mid-upload, a slow link, a blackholed address, a port that never
speaks SSH, an sshd turning connections away (MaxStartups), a command flooding its output.

Each deploy that fails asserts: the exit code, one line on stderr naming the step, no
traceback, and `current` on the device still the release it was, complete."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from edgekit.api.build import BuildOptions, build
from edgekit.api.deploy import DeployOptions, deploy
from edgekit.config.address import parse_address
from edgekit.config.timeouts import Timeouts
from edgekit.errors import DeviceUnreachable
from edgekit.lab import devices as lab
from edgekit.transport import ssh
from edgekit.transport.ssh import connect, pin_host_key
from tests.faults.proxy import FaultProxy, blackhole

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kws_mlp.yaml"
APP = "kws-mlp"
# short deadlines, so that a test proves "ends within the deadline" in seconds
FAST = {"EDGEKIT_TIMEOUT_CONNECT_S": "3", "EDGEKIT_TIMEOUT_BANNER_S": "3",
        "EDGEKIT_TIMEOUT_AUTH_S": "5", "EDGEKIT_TIMEOUT_SFTP_S": "4"}
MIDWAY = 400_000   # upstream bytes: past the handshake and preflight, inside the 1 MB module


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Three releases of one app with other weights: each has its own 1 MB module, which an
    upload must send (a file another release on the device holds is copied there instead)."""
    folder = tmp_path_factory.mktemp("network-bundles")
    paths = {}
    for seed in (0, 1, 2):
        (folder / f"kws_{seed}.py").write_text(
            "import torch\nfrom edgekit.examples.models import KeywordSpottingMLP\n\n\n"
            f"def model():\n    torch.manual_seed({seed})\n"
            "    return KeywordSpottingMLP().eval(), (torch.randn(1, 49, 10),)\n")
        recipe = folder / f"kws_mlp_{seed}.yaml"
        recipe.write_text(RECIPE.read_text().replace(
            "python: edgekit.examples.models:kws_mlp", f"python: kws_{seed}.py:model"))
        paths[f"v{seed + 1}"] = build(BuildOptions(recipe=recipe, target="host",
                                                   out=folder / f"v{seed + 1}")).bundle.path
    return paths


@pytest.fixture(scope="module")
def device(fault_device, bundles):
    """The lab device with v1 deployed (directly, not through a proxy)."""
    deploy(DeployOptions(host=fault_device.name, bundle=bundles["v1"]))
    return fault_device


@pytest.fixture
def proxy(fault_device):
    """A FaultProxy in front of the device, its host key pinned for the proxy's address."""
    pub = (Path(fault_device.config_dir) / "ssh_host_ed25519_key.pub").read_text().split()
    with FaultProxy((fault_device.host, fault_device.port)) as p:
        p.address = f"{fault_device.user}@{p.host}:{p.port}"
        pin_host_key(parse_address(p.address), pub[0], pub[1], replace=True)
        yield p


def edgekit(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "edgekit.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **FAST, "PYTHONPATH": str(REPO)})
    return proc, time.monotonic() - started


def deploy_through(address: str, bundle: Path):
    return edgekit("deploy", str(bundle), "--host", address,
                   "--identity", str(lab.identity_path()))


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The error's line (its hint, when it has one, on the next)."""
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: ")), proc.stderr
    assert "Traceback" not in proc.stderr and "Aborted" not in proc.stderr
    return lines[0]


def current(device) -> str | None:
    link = device.host_path(device.home) / ".edgekit" / "apps" / APP / "current"
    return os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else None


def assert_complete(device, release: str) -> None:
    """Every file SHA256SUMS lists is there with its sha256 (what verify.sh checks)."""
    folder = device.host_path(device.home) / ".edgekit" / "apps" / APP / "releases" / release
    sums = (folder / "SHA256SUMS").read_text().splitlines()
    assert sums
    for line in sums:
        digest, name = line.split(maxsplit=1)
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_a_connection_cut_mid_upload_is_exit_10_naming_the_upload(device, proxy, bundles):
    before = current(device)
    proxy.cut_after(MIDWAY)
    proc, _ = deploy_through(proxy.address, bundles["v2"])
    assert proxy.triggered.is_set() and proc.returncode == 10, (proc.returncode, proc.stdout,
                                                                proc.stderr)
    line = one_error_line(proc)
    assert re.search(r"upload of \S+module\.vmfb: connection lost", line), line
    assert current(device) == before
    assert_complete(device, before)


def test_a_stall_mid_upload_ends_within_its_deadline_with_exit_10(device, proxy, bundles):
    before = current(device)
    proxy.stall_after(MIDWAY)
    proc, seconds = deploy_through(proxy.address, bundles["v2"])
    assert proxy.triggered.is_set() and proc.returncode == 10, proc.stderr
    line = one_error_line(proc)
    assert re.search(r"upload of \S+module\.vmfb: the device stopped answering for 4 s "
                     r"\(timeouts\.sftp_s\)", line), line
    assert seconds < 4 + 15, f"took {seconds:.0f} s"
    assert current(device) == before
    assert_complete(device, before)


def test_a_slow_link_completes_the_deploy(device, proxy, bundles):
    proxy.slow(400_000)  # the 1 MB upload takes seconds: no deadline is a budget for a whole
    proc, _ = deploy_through(proxy.address, bundles["v3"])
    assert proc.returncode == 0, proc.stderr
    release = current(device)
    assert release in proc.stdout
    assert_complete(device, release)


def test_a_blackholed_address_fails_at_connect_within_its_deadline(device, bundles):
    before = current(device)
    with blackhole() as (host, port):
        proc, seconds = deploy_through(f"{device.user}@{host}:{port}", bundles["v2"])
    assert proc.returncode == 10
    assert "connect: no answer within 3 s (timeouts.connect_s)" in one_error_line(proc)
    assert "`edgekit probe" in proc.stderr     # the hint says what to check
    assert seconds < 3 + 10, f"took {seconds:.0f} s"
    assert current(device) == before


def test_a_port_that_never_speaks_ssh_fails_after_the_banner_deadline_in_one_line(
        device, proxy, bundles):
    before = current(device)
    proxy.mute()
    proc, seconds = deploy_through(proxy.address, bundles["v2"])
    assert proc.returncode == 10
    line = one_error_line(proc)  # and no paramiko traceback from its logger
    assert "banner: no SSH banner within 3 s (timeouts.banner_s)" in line, line
    assert seconds < 3 + 10 and proxy.connections == 1  # a silent port is not retried
    assert current(device) == before


def test_a_stalled_command_and_file_operation_end_at_their_deadlines(proxy):
    timeouts = Timeouts(sftp_s=2, auth_s=3)
    for operation, step in ((lambda c: c.run(["true"], timeout=3), "command 'true'"),
                            (lambda c: c.listdir(".edgekit"), "listing of .edgekit")):
        with connect(parse_address(proxy.address), lab.identity_path(),
                     timeouts=timeouts) as conn:
            proxy.stall_after(0)  # from now on nothing more goes through, either way
            started = time.monotonic()
            with pytest.raises(DeviceUnreachable, match=re.escape(step) + ".*stopped answering"):
                operation(conn)
            assert time.monotonic() - started < 3 + 2 + 5
            # the connection is over: the next operation fails at once, with the same cause
            started = time.monotonic()
            with pytest.raises(DeviceUnreachable, match=re.escape(step)):
                conn.mkdirs("x")
            assert time.monotonic() - started < 1
        proxy.clear()


@pytest.fixture
def crowded_sshd(fault_device, tmp_path):
    """A second sshd for the same device user and host key, with `MaxStartups 2`: beyond two
    connections in the handshake it drops new ones at once."""
    device = fault_device
    config_dir = Path(device.config_dir)
    port = free_port(device.host)
    config = tmp_path / "sshd_config"
    lines = [ln for ln in (config_dir / "sshd_config").read_text().splitlines()
             if not ln.startswith(("ListenAddress", "Port", "PidFile"))]
    config.write_text("\n".join([f"ListenAddress {device.host}:{port}",
                                 f"PidFile {tmp_path}/sshd.pid", "MaxStartups 2",
                                 *lines, ""]))
    log = tmp_path / "sshd.log"
    subprocess.run(["/usr/sbin/sshd", "-f", str(config), "-E", str(log)], check=True)
    pub = (config_dir / "ssh_host_ed25519_key.pub").read_text().split()
    address = f"{device.user}@{device.host}:{port}"
    pin_host_key(parse_address(address), pub[0], pub[1], replace=True)
    try:
        yield address, log
    finally:
        os.kill(int((tmp_path / "sshd.pid").read_text()), signal.SIGTERM)


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def test_twenty_devices_against_an_sshd_with_max_startups_2_all_get_in(crowded_sshd):
    address, log = crowded_sshd

    def probe(_: int) -> str:
        with connect(parse_address(address), lab.identity_path()) as conn:
            return conn.run(["sh", "-c", "echo ok"]).text.strip()

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        results = list(pool.map(probe, range(20)))
    assert results == ["ok"] * 20
    assert "MaxStartups" in log.read_text()  # connections were turned away, and retried


def test_a_fleet_of_twenty_behind_an_sshd_with_max_startups_2_is_read_whole(
        device, crowded_sshd, tmp_path):
    """`fleet status` reads 20 devices at once (all this sshd, by 20 names): every row."""
    address, log = crowded_sshd
    user, _, host_port = address.partition("@")
    host, _, port = host_port.partition(":")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({
        "defaults": {"host": host, "port": int(port), "user": user, "target": "host",
                     "identity": str(lab.identity_path())},
        "devices": {f"crowd-{i:02}": {} for i in range(20)},
        "rollout": {"concurrency": 20}}))
    proc, seconds = edgekit("fleet", "status", "--fleet", str(fleet), "--app", APP, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["device"] for r in rows) == [f"crowd-{i:02}" for i in range(20)]
    assert [(r["reachable"], r["error"]) for r in rows] == [(True, "")] * 20
    assert {r["current"] for r in rows} == {current(device)}
    assert {r["last_validation"]["ok"] for r in rows} == {True}
    assert "MaxStartups" in log.read_text()  # connections were turned away, and retried
    assert seconds < 60, f"took {seconds:.0f} s"


FLOOD = """
import re, sys
from pathlib import Path
from edgekit.config.address import parse_address
from edgekit.transport.ssh import connect
with connect(parse_address(sys.argv[1]), Path(sys.argv[2])) as conn:
    result = conn.run(["sh", "-c", "head -c 300000000 /dev/zero; echo last line"])
peak_kib = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text())[1])
print(len(result.stdout), result.stdout_cut, peak_kib // 1024,
      result.stdout.endswith(b"last line\\n"))
"""


def test_a_command_printing_300_mb_over_ssh_keeps_edgekit_small(fault_device):
    """Peak RSS of a process of its own (VmHWM: ru_maxrss would carry pytest's over exec)."""
    proc = subprocess.run([sys.executable, "-c", FLOOD, fault_device.address,
                           str(lab.identity_path())], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    kept, cut, rss_mib, tail_kept = proc.stdout.split()
    assert int(kept) < 3 << 20 and int(cut) > 290_000_000 and tail_kept == "True"
    assert int(rss_mib) < 150, f"peak RSS {rss_mib} MiB for 300 MB of output"


def test_output_sent_after_the_exit_status_is_kept_whole(fault_device):
    """sshd sends the exit status when the command exits; output still in the pipe (here a
    child's, written after) follows it. Stopping at the exit status lost it (CI: a flood's
    last 17 KB)."""
    with connect(parse_address(fault_device.address), lab.identity_path()) as conn:
        result = conn.run(["sh", "-c", "(sleep 0.3; head -c 400000 /dev/zero; echo last line)"
                                       " & exit 0"])
    assert len(result.stdout) == 400_010 and result.stdout.endswith(b"last line\n")


def test_a_pipe_held_open_by_a_process_left_running_does_not_hang_the_command(fault_device):
    """No EOF comes while a background process holds stdout: the run ends a grace period
    after the exit status, with what the command printed."""
    with connect(parse_address(fault_device.address), lab.identity_path()) as conn:
        started = time.monotonic()
        result = conn.run(["sh", "-c", "sleep 5 & echo started"])
        seconds = time.monotonic() - started
    assert result.stdout == b"started\n" and seconds < 4, f"{seconds:.1f} s"


def test_a_process_left_writing_to_the_pipe_ends_the_command_at_a_limit(fault_device,
                                                                        monkeypatch):
    """Output that never stops after the exit (a chatty daemon the command started, still
    holding stdout) is read until a limit after the exit status, not until the deadline."""
    monkeypatch.setattr(ssh, "OUTPUT_AFTER_EXIT_LIMIT_S", 1.0)
    with connect(parse_address(fault_device.address), lab.identity_path()) as conn:
        started = time.monotonic()
        result = conn.run(["sh", "-c", "timeout 6 sh -c 'while :; do echo chat; sleep 0.1;"
                                       " done' & echo started"], timeout=30)
        seconds = time.monotonic() - started
    lines = result.stdout.splitlines()
    assert b"started" in lines and b"chat" in lines and seconds < 3, f"{seconds:.1f} s"
