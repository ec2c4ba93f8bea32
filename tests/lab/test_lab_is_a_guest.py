"""The lab touches only what it created and recorded: it creates no users and mounts nothing on
this machine (an aarch64 session's mounts live in its own namespace), `lab down` ends a device's
own process tree (never "every process of uid N": that uid is the user's own), and device names
are numbered per lab, so a fresh lab's first device is `lab-<arch>-1` whatever other labs run."""

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from edgekit.config.devices import resolve_device
from edgekit.errors import ConfigError
from edgekit.lab import devices as lab
from edgekit.lab.procs import identify
from edgekit.lab.rootfs import rootfs_path
from edgekit.transport.ssh import connect


@contextmanager
def lab_home(home: Path):
    """Act as the lab of another $EDGEKIT_HOME (another user's lab, another test session)."""
    saved = os.environ["EDGEKIT_HOME"]
    os.environ["EDGEKIT_HOME"] = str(home)
    try:
        yield
    finally:
        os.environ["EDGEKIT_HOME"] = saved


def machine_state() -> tuple[str, str, list[str]]:
    """What a guest must leave as it found it: users, groups and this namespace's mounts."""
    mounts = [ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()]
    return Path("/etc/passwd").read_text(), Path("/etc/group").read_text(), sorted(mounts)


@pytest.fixture
def bystanders():
    """Processes of this machine's user that the lab did not start (e.g. the session of the
    person at the keyboard: the lab's devices run as that same user)."""
    started = []

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def ssh_run(device, argv: list[str]) -> str:
    address, key = resolve_device(device.name)
    with connect(address, key) as conn:
        return conn.run(argv).stdout.decode()


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_down_ends_what_the_device_started_and_spares_the_users_other_processes(
        arch, tmp_path_factory, bystanders):
    before = machine_state()
    with lab_home(tmp_path_factory.mktemp(f"lab-{arch}")):
        device = lab.up(arch, 1)[0]
        other = bystanders()       # same uid as the device, not started by the lab
        # a job the device's user left running after logging out: not below sshd any more
        left = int(ssh_run(device, ["sh", "-c", "nohup sleep 301 >/dev/null 2>&1 & echo $!"]))
        assert identify(left) is not None
        assert machine_state() == before, "lab up created a user or mounted something here"
        lab.down()
    assert other.poll() is None, "lab down killed a process it did not start"
    assert identify(left) is None, "the device's detached job outlived lab down"
    assert machine_state() == before


def test_an_aarch64_session_runs_arm64_programs_in_a_rootfs_it_cannot_change(tmp_path_factory):
    with lab_home(tmp_path_factory.mktemp("lab-arm")):
        device = lab.up("aarch64", 1)[0]
        try:
            out = ssh_run(device, ["sh", "-c", "uname -m; echo $HOME; touch /etc/edgekit-x "
                                   "2>/dev/null || echo read-only; echo hi > /tmp/t; pwd"])
            assert out.split() == ["aarch64", "/root", "read-only", "/root"]
            assert device.host_path("/tmp/t").read_text() == "hi\n"   # the device's own /tmp
            assert not (rootfs_path() / "tmp" / "t").exists()
        finally:
            lab.down()


def test_a_fresh_labs_devices_are_numbered_from_one_beside_another_lab(tmp_path_factory):
    with lab_home(tmp_path_factory.mktemp("lab-one")):
        first = lab.up("x86_64", 1)[0]
        try:
            with lab_home(tmp_path_factory.mktemp("lab-two")):
                second = lab.up("x86_64", 2)
                try:
                    assert [d.name for d in second] == ["lab-x86_64-1", "lab-x86_64-2"]
                    assert first.host not in {d.host for d in second}
                finally:
                    lab.down()
            assert first.name == "lab-x86_64-1"
        finally:
            lab.down()


def test_a_chosen_name_is_used_and_a_taken_one_refused(tmp_path_factory):
    with lab_home(tmp_path_factory.mktemp("lab-named")):
        try:
            device = lab.up("x86_64", names=["bench-box"])[0]
            assert device.name == "bench-box" and resolve_device("bench-box")[0].port == 2222
            with pytest.raises(ConfigError, match="already registered"):
                lab.up("x86_64", names=["bench-box"])
            with pytest.raises(ConfigError, match="is not a name"):
                lab.up("x86_64", names=["root@10.0.0.1"])
            assert [d["name"] for d in lab.status()] == ["bench-box"]
        finally:
            lab.down()
