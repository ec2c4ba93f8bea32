"""`edgekit lab up|status|down`: devices that are real OpenSSH servers on 127.0.0.x.

Each device has its own address, host key, login user (with its own home: the device's disk)
and authorized key. x86_64 devices are users of this machine (Mesa's llvmpipe gives them a
Vulkan device); aarch64 devices live in the shared arm64 rootfs and run its arm64 sshd under
qemu. `up` pins every host key it creates (no network trust-on-first-use) and registers the
devices by name, so `--host lab-aarch64-1` works.

The lab is a guest on this machine: it records what it creates (the device user by name and
uid, the device's process tree by the pid and start time of its root, see `reaper.py`) before
it runs anything, and `down` removes only what is recorded — it never kills by uid. Device
users get uids from `LAB_UIDS`, each free on the host and in the rootfs (no passwd entry, no
process), so a device user never shares a uid with someone on this machine. The rootfs's
/proc and /dev mounts are shared with other labs and reference-counted (`rootfs.hold_mounts`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from edgekit.config.devices import DeviceEntry, load_registry, save_registry
from edgekit.config.paths import edgekit_home, known_hosts_path
from edgekit.config.schema_base import Frozen, load_model_map, save_model_map
from edgekit.errors import EdgekitError, LabSetupError, ToolError
from edgekit.lab.procs import Proc, alive, identify, send, uids_in_use
from edgekit.lab.reaper import descendants
from edgekit.lab.rootfs import ensure_rootfs, hold_mounts, release_mounts, rootfs_path
from edgekit.toolchain.runner import run_tool
from edgekit.config.address import parse_address
from edgekit.transport.ssh import pin_host_key

PORT = 2222
FIRST_OCTET = 10
HOMES = Path("/srv/edgekit-lab")   # world-traversable, so device users can reach their homes
# uids (and gids) of device users: above UID_MAX (60000: the host's next login uid does not
# move) and 16-bit uids, below the default /etc/subuid ranges (100000+) and systemd's
# container ranges (524288+). Each one is also checked free on the host and in the rootfs.
LAB_UIDS = range(70000, 71000)
REAPER = Path(__file__).with_name("reaper.py")


class LabDevice(Frozen):
    name: str
    arch: Literal["x86_64", "aarch64"]
    host: str
    port: int
    user: str
    index: int
    chroot: str = ""        # the rootfs for aarch64 devices ("" for x86_64)
    config_dir: str         # sshd config, host key, authorized_keys, pid, log (host path)
    home: str               # the device's home directory (host path)
    uid: int = -1           # the device user's uid, as created (-1: recorded by an older lab)
    pid: int = 0            # the host pid of the device's process tree root (reaper.py) ...
    pid_started: int = 0    # ... and its start time: a recycled pid is never taken for it

    @property
    def process(self) -> Proc:
        return Proc(self.pid, self.pid_started)

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def host_path(self, inside: str) -> Path:
        """A path as the device sees it → the same file on this machine."""
        return Path(self.chroot + inside) if self.chroot else Path(inside)


def lab_dir() -> Path:
    return edgekit_home() / "lab"


def identity_path() -> Path:
    return lab_dir() / "id_ed25519"


def _state_path() -> Path:
    return lab_dir() / "devices.json"


def load_lab() -> dict[str, LabDevice]:
    return load_model_map(_state_path(), LabDevice)


def _save_lab(devices: dict[str, LabDevice]) -> None:
    save_model_map(_state_path(), devices)


def _lab_id() -> str:
    """Separates the homes of labs with different EDGEKIT_HOMEs (e.g. test sessions)."""
    return hashlib.sha256(str(edgekit_home().resolve()).encode()).hexdigest()[:8]


def up(arch: str = "x86_64", count: int = 1,
       on_progress: Callable[[str], None] | None = None) -> list[LabDevice]:
    """Start `count` new devices of `arch`; returns them (running, keys pinned, registered)."""
    if os.geteuid() != 0:
        raise LabSetupError("the lab needs root (it starts sshd and creates device users)")
    if not Path("/usr/sbin/sshd").exists() and arch == "x86_64":
        raise LabSetupError("OpenSSH server is not installed",
                            hint="apt-get install openssh-server")
    _ensure_identity()
    chroot = str(ensure_rootfs(on_progress)) if arch == "aarch64" else ""
    devices = load_lab()
    started = []
    used = {d.index for d in devices.values()}
    for _ in range(count):
        index = next(i for i in range(1, 240)
                     if i not in used and _free(f"127.0.0.{FIRST_OCTET + i}", PORT))
        used.add(index)
        device = _plan(arch, index, chroot)
        devices[device.name] = device
        _save_lab(devices)        # recorded before anything is created: `down` can undo it
        try:
            device = _create(device)
            devices[device.name] = device
            _save_lab(devices)
            if chroot:            # held by this process while the device starts
                hold_mounts(Path(chroot), _holder(device), home=str(edgekit_home()),
                            proc=identify(os.getpid()))
            if on_progress:
                on_progress(f"starting {device.name} at {device.address}")
            device = _spawn(device)
            devices[device.name] = device
            _save_lab(devices)
            if chroot:            # held by the device's process tree from now on
                hold_mounts(Path(chroot), _holder(device), home=str(edgekit_home()),
                            proc=device.process)
            _wait_until_ready(device)
        except BaseException:
            try:
                down([device.name])     # undo what was recorded; the first error is the news
            except (EdgekitError, OSError):
                pass
            raise
        _register(device)
        started.append(device)
    return started


def status() -> list[dict]:
    return [{**d.model_dump(), "address": d.address, "running": _running(d),
             "identity": str(identity_path())} for d in load_lab().values()]


def down(names: list[str] | None = None,
         on_progress: Callable[[str], None] | None = None) -> list[str]:
    """Stop lab devices (all, or those named) and remove their users, homes and
    registrations."""
    lab = load_lab()
    devices = {n: d for n, d in lab.items() if names is None or n in names}
    for device in devices.values():
        if on_progress:
            on_progress(f"stopping {device.name}")
        _stop(device)
        _remove_user(device, on_progress)
        own = Path(device.config_dir).parent        # <root>/srv/edgekit-lab/<lab id>/<name>
        shutil.rmtree(own, ignore_errors=True)
        try:
            own.parent.rmdir()                      # this lab's folder, once it is empty
        except OSError:
            pass
        if device.chroot:
            unmounted = release_mounts(Path(device.chroot), _holder(device))
            if on_progress and unmounted:
                on_progress(f"unmounted {', '.join('/' + m for m in unmounted)} "
                            f"in {device.chroot} (no other lab device runs there)")
    remaining = {n: d for n, d in lab.items() if n not in devices}
    registry = load_registry()
    save_registry({n: e for n, e in registry.items() if n not in devices})
    _save_lab(remaining)
    return list(devices)


def _ensure_identity() -> None:
    key = identity_path()
    if key.is_file():
        return
    key.parent.mkdir(parents=True, exist_ok=True)
    run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgekit-lab", "-f", str(key)],
             what="creating the lab's SSH key", hint="apt-get install openssh-client")


def _holder(device: LabDevice) -> str:
    """The device's name among the holders of its rootfs's mounts (unique across labs)."""
    return f"{_lab_id()}-{device.name}"


def _plan(arch: str, index: int, chroot: str) -> LabDevice:
    """The device's record: its names, paths and a free uid; nothing is created yet."""
    name = f"lab-{arch}-{index}"
    user = f"ekd{_lab_id()[:4]}{index}"
    if _passwd_entry(chroot, user) is not None:
        raise LabSetupError(f"a user named {user} already exists"
                            + (f" in {chroot}" if chroot else " on this machine")
                            + "; the lab does not reuse or remove users it has not recorded",
                            hint=f"if it is left over from an earlier lab: userdel "
                                 f"{'-R ' + chroot + ' ' if chroot else ''}{user}")
    inside = f"{HOMES}/{_lab_id()}/{name}"
    return LabDevice(name=name, arch=arch, host=f"127.0.0.{FIRST_OCTET + index}", port=PORT,
                     user=user, index=index, chroot=chroot,
                     config_dir=str(Path(chroot + inside) / "sshd"),
                     home=f"{inside}/home", uid=_free_uid(chroot))


def _create(device: LabDevice) -> LabDevice:
    """The device's folders, host key and user; returns it with the uid it got."""
    name, chroot = device.name, device.chroot
    inside = device.config_dir.removeprefix(chroot).removesuffix("/sshd")
    config = Path(device.config_dir)
    shutil.rmtree(config, ignore_errors=True)
    config.mkdir(parents=True)
    homes = Path(chroot + str(HOMES))
    for folder in [Path(chroot + inside), *Path(chroot + inside).parents]:
        if folder == homes or homes in folder.parents:
            os.chmod(folder, 0o755)
    run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
              "-f", str(config / "ssh_host_ed25519_key")], what="creating a device host key")
    shutil.copyfile(identity_path().with_suffix(".pub"), config / "authorized_keys")
    for attempt in range(3):
        try:
            _add_user(device)
            break
        except ToolError as exc:    # 4: another lab took the uid since `_plan` chose it
            if exc.returncode != 4 or attempt == 2:
                raise
            device = device.model_copy(update={"uid": _free_uid(chroot)})
    (config / "sshd_config").write_text(_sshd_config(device, inside))
    return device


def _sshd_config(device: LabDevice, inside: str) -> str:
    d = f"{inside}/sshd"
    return "\n".join([
        f"ListenAddress {device.host}", f"Port {device.port}",
        f"HostKey {d}/ssh_host_ed25519_key", f"AuthorizedKeysFile {d}/authorized_keys",
        f"PidFile {d}/sshd.pid", f"AllowUsers {device.user}",
        "UsePAM no", "StrictModes no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "PermitRootLogin no",
        "AllowAgentForwarding no", "AllowTcpForwarding no", "X11Forwarding no",
        "Subsystem sftp internal-sftp", "LogLevel VERBOSE", ""])


def _passwd_entry(chroot: str, user: str) -> list[str] | None:
    passwd = Path(chroot + "/etc/passwd")
    return next((line.split(":") for line in passwd.read_text().splitlines()
                 if line.startswith(f"{user}:")), None)


def _passwd_uids(passwd: Path) -> set[int]:
    if not passwd.is_file():
        return set()
    return {int(f[2]) for f in (ln.split(":") for ln in passwd.read_text().splitlines())
            if len(f) > 2 and f[2].isdigit()}


def _free_uid(chroot: str) -> int:
    """A uid of LAB_UIDS that no one uses: not in the host's passwd, the device's rootfs's or
    the shared rootfs's, and no process runs as it."""
    taken = uids_in_use()
    for passwd in {Path("/etc/passwd"), Path(chroot + "/etc/passwd"),
                   rootfs_path() / "etc" / "passwd"}:
        taken |= _passwd_uids(passwd)
    uid = next((u for u in LAB_UIDS if u not in taken), None)
    if uid is None:
        raise LabSetupError(f"no free uid left for a lab device user in {LAB_UIDS.start}.."
                            f"{LAB_UIDS.stop - 1}", hint="stop some lab devices (edgekit lab down)")
    return uid


def _add_user(device: LabDevice) -> None:
    root = ["-R", device.chroot] if device.chroot else []
    lab_range = [f"GID_MIN={LAB_UIDS.start}", f"GID_MAX={LAB_UIDS.stop - 1}",
                 "SUB_UID_COUNT=0", "SUB_GID_COUNT=0"]    # no /etc/subuid entries
    run_tool(["useradd", *root, "--uid", str(device.uid), "--no-log-init",
              *[a for kv in lab_range for a in ("-K", kv)],
              "--home-dir", device.home, "--create-home", "--shell", "/bin/sh", device.user],
             what=f"creating the device user {device.user} (uid {device.uid})")
    # '*' (no password) instead of useradd's '!' (locked): sshd without PAM refuses locked users
    run_tool(["usermod", *root, "-p", "*", device.user], what="unlocking the device user")


def _remove_user(device: LabDevice,
                 on_progress: Callable[[str], None] | None = None) -> None:
    """Remove the device user the lab created: by its recorded name, and only while that name
    still has the recorded uid. Its processes are gone with the device's process tree."""
    root = ["-R", device.chroot] if device.chroot else []
    entry = _passwd_entry(device.chroot, device.user)
    if entry is None or (device.uid >= 0 and entry[2] != str(device.uid)):
        return
    try:
        run_tool(["userdel", *root, device.user], what=f"removing the device user {device.user}")
    except ToolError as exc:
        if exc.returncode != 8:     # 8: processes the lab did not start still run as the uid
            raise
        run_tool(["userdel", "--force", *root, device.user],
                 what=f"removing the device user {device.user}")
        if on_progress:
            on_progress(f"removed {device.user}; processes of uid {entry[2]} that the lab did "
                        "not start are left running")


def _spawn(device: LabDevice) -> LabDevice:
    """Start the device's sshd below reaper.py (not daemonized: its whole process tree stays
    below the reaper); returns the device with the reaper's pid and start time."""
    inside = device.config_dir.removeprefix(device.chroot)
    privsep = device.host_path("/run/sshd")     # sshd's privilege separation directory
    if not privsep.is_dir():
        privsep.mkdir(parents=True)
    argv = ["/usr/sbin/sshd", "-D", "-f", f"{inside}/sshd_config", "-E", f"{inside}/sshd.log"]
    if device.chroot:
        argv = ["chroot", device.chroot, *argv]
    reaper = subprocess.Popen([sys.executable, "-I", "-S", str(REAPER), *argv],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    proc = identify(reaper.pid)
    return device.model_copy(update={"pid": reaper.pid,
                                     "pid_started": proc.started if proc else 0})


def _wait_until_ready(device: LabDevice) -> None:
    """sshd answers with its banner; its host key is pinned."""
    config = Path(device.config_dir)
    _wait_for_banner(device, timeout=60)
    pub = (config / "ssh_host_ed25519_key.pub").read_text().split()
    pin_host_key(parse_address(device.address), pub[0], pub[1], replace=True,
                 known_hosts=known_hosts_path())


def _free(host: str, port: int) -> bool:
    """Nothing listens there yet (another lab, e.g. of another EDGEKIT_HOME, may)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return False
    except OSError:
        return True


def _wait_for_banner(device: LabDevice, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if device.pid and not alive(device.process):
            break                               # sshd (and so its reaper) ended
        try:
            with socket.create_connection((device.host, device.port), timeout=5) as sock:
                sock.settimeout(10)
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.3)
    raise LabSetupError(f"{device.name} did not start: no SSH banner on "
                        f"{device.host}:{device.port}",
                        hint=f"see {Path(device.config_dir) / 'sshd.log'}")


def _legacy_sshd(device: LabDevice) -> Proc | None:
    """The sshd of a device recorded by an older lab (no pid recorded): its pid file's pid, if
    that process is this device's sshd (its command line names the device's config)."""
    try:
        pid = int((Path(device.config_dir) / "sshd.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    config = device.config_dir.removeprefix(device.chroot) + "/sshd_config"
    return identify(pid) if config.encode() in cmdline else None


def _running(device: LabDevice) -> bool:
    if device.pid:
        return alive(device.process)
    return _legacy_sshd(device) is not None


def _stop(device: LabDevice) -> None:
    """End the device's process tree: sshd, its sessions and whatever they left running."""
    if not device.pid:
        legacy = _legacy_sshd(device)
        if legacy is not None:
            send(legacy, signal.SIGTERM)
        return
    if not send(device.process, signal.SIGTERM):    # the reaper ends its tree, then itself
        return
    for _ in range(100):
        if not alive(device.process):
            return
        time.sleep(0.1)
    for pid in descendants(device.pid):             # a reaper that does not answer
        if (proc := identify(pid)) is not None:
            send(proc, signal.SIGKILL)
    send(device.process, signal.SIGKILL)


def _register(device: LabDevice) -> None:
    registry = load_registry()
    registry[device.name] = DeviceEntry(name=device.name, address=device.address,
                                        identity=str(identity_path()), arch=device.arch, lab=True)
    save_registry(registry)
