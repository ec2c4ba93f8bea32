"""The lab touches only what it created and recorded: `lab down` ends a device's own process
tree (never "every process of uid N"), removes the users it created, and unmounts the shared
arm64 rootfs's /proc and /dev only when no device of any lab runs there any more."""

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from edgekit.config.devices import resolve_device
from edgekit.device.probe import probe
from edgekit.lab import devices as lab
from edgekit.lab.procs import identify
from edgekit.lab.rootfs import hold_mounts, mounts_dir, release_mounts, rootfs_path
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


def passwd_uids(root: str = "") -> dict[str, int]:
    lines = Path(root + "/etc/passwd").read_text().splitlines()
    return {f[0]: int(f[2]) for f in (ln.split(":") for ln in lines)}


@pytest.fixture
def bystanders():
    """Processes of this machine that the lab did not start (e.g. the session of the person at
    the keyboard), as whichever uid a test asks for."""
    started = []

    def start(uid: int) -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "300"], user=uid, start_new_session=True)
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def mounted(path: Path) -> bool:
    target = str(path.resolve())
    return any(ln.split()[1] == target for ln in Path("/proc/mounts").read_text().splitlines())


def ssh_run(device, argv: list[str]) -> str:
    address, key = resolve_device(device.name)
    with connect(address, key) as conn:
        return conn.run(argv).stdout.decode()


def test_x86_down_ends_what_the_device_started_and_spares_others_of_the_same_uid(
        tmp_path_factory, bystanders):
    with lab_home(tmp_path_factory.mktemp("lab-x86")):
        device = lab.up("x86_64", 1)[0]
        uid = passwd_uids()[device.user]
        other = bystanders(uid)       # same uid, not started by the lab
        # a job the device's user left running after logging out: not below sshd any more
        left = int(ssh_run(device, ["sh", "-c", "nohup sleep 301 >/dev/null 2>&1 & echo $!"]))
        assert identify(left) is not None
        lab.down()
    assert other.poll() is None, "lab down killed a process it did not start"
    assert identify(left) is None, "the device's detached job outlived lab down"
    assert device.user not in passwd_uids()


@pytest.fixture(scope="module")
def two_arm_labs(tmp_path_factory):
    """Two labs (two $EDGEKIT_HOMEs) with an aarch64 device each, in the same rootfs."""
    homes = [tmp_path_factory.mktemp("lab-a"), tmp_path_factory.mktemp("lab-b")]
    devices = []
    for home in homes:
        with lab_home(home):
            devices.append(lab.up("aarch64", 1)[0])
    yield list(zip(homes, devices))
    for home in homes:
        with lab_home(home):
            lab.down()


def test_an_aarch64_device_user_has_a_uid_no_one_on_the_host_has(two_arm_labs):
    host = set(passwd_uids().values())
    for _, device in two_arm_labs:
        uid = passwd_uids(device.chroot)[device.user]
        assert uid == device.uid and uid in lab.LAB_UIDS and uid not in host


def test_down_of_one_lab_spares_the_hosts_processes_and_the_other_labs_device(
        two_arm_labs, bystanders):
    (home_a, device_a), (home_b, device_b) = two_arm_labs
    # someone on the host whose uid is the device user's (the rootfs's passwd, not the host's,
    # gave it out: on a laptop, uid 1000 is the person at the keyboard)
    other = bystanders(passwd_uids(device_a.chroot)[device_a.user])
    with lab_home(home_a):
        lab.down()
    assert other.poll() is None, "lab down killed a host process of the device user's uid"
    root = Path(device_b.chroot)
    assert mounted(root / "proc") and mounted(root / "dev")
    with lab_home(home_b):
        address, key = resolve_device(device_b.name)
        with connect(address, key) as conn:
            assert probe(conn).mem_kb > 0     # /proc is still there for the other lab


def test_the_rootfs_mounts_go_when_the_last_lab_is_down(two_arm_labs):
    for home, _ in two_arm_labs:
        with lab_home(home):
            lab.down()
    root = rootfs_path()
    others = list(mounts_dir(root).glob("holder-*.json"))   # e.g. tests/device's session lab
    assert mounted(root / "proc") == bool(others)
    assert mounted(root / "dev") == bool(others)


def test_a_dead_labs_hold_is_ignored_and_a_mount_that_was_there_before_stays(tmp_path):
    root = tmp_path / "rootfs"
    for sub in ("proc", "dev"):
        (root / sub).mkdir(parents=True)
    subprocess.run(["mount", "--bind", "/dev", str(root / "dev")], check=True)  # not the lab's
    crashed = subprocess.Popen(["sleep", "300"])
    live = subprocess.Popen(["sleep", "300"])
    try:
        hold_mounts(root, "crashed-lab", home="/a", proc=identify(crashed.pid))
        hold_mounts(root, "live-lab", home="/b", proc=identify(live.pid))
        assert mounted(root / "proc")
        crashed.kill()
        crashed.wait()          # a lab that died without `lab down`
        assert release_mounts(root, "live-lab") == ["proc"]
        assert not mounted(root / "proc")
        assert mounted(root / "dev"), "lab down unmounted a mount it did not make"
        assert not list(mounts_dir(root).glob("holder-*"))
    finally:
        live.kill()
        live.wait()
        for sub in ("proc", "dev"):
            if mounted(root / sub):
                subprocess.run(["umount", "-l", str(root / sub)], check=True)


def test_a_live_holder_keeps_the_mounts(tmp_path):
    root = tmp_path / "rootfs"
    for sub in ("proc", "dev"):
        (root / sub).mkdir(parents=True)
    try:
        hold_mounts(root, "lab-a-dev-1", home="/a", proc=identify(os.getpid()))
        hold_mounts(root, "lab-b-dev-1", home="/b", proc=identify(os.getpid()))
        assert release_mounts(root, "lab-a-dev-1") == []
        assert mounted(root / "proc") and mounted(root / "dev")
        assert release_mounts(root, "lab-b-dev-1") == ["dev", "proc"]
        assert not mounted(root / "proc") and not mounted(root / "dev")
    finally:
        for sub in ("proc", "dev"):
            if mounted(root / sub):
                subprocess.run(["umount", "-l", str(root / sub)], check=True)
