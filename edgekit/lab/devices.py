"""`edgekit lab up|status|down`: devices that are real OpenSSH servers on 127.0.0.x, run by the
invoking user — no root, no users created, nothing mounted on this machine.

Each device has its own address, sshd (as this user, on a port above 1024, with its own host
key and authorized key), home directory and login: sshd's ForceCommand is the device's `enter`
script, through which every session (commands, shells and SFTP alike) runs in a user namespace
(this user mapped to root) with a mount namespace of its own. An x86_64 device binds its own
home folder over the user's home (so `~` and `~USER` are the device's) and returns to the
user's uid in a nested user namespace; Mesa's llvmpipe gives it a Vulkan device. An aarch64
device binds /dev, /proc, /sys and its own home (/root) and /tmp into a read-only view of the
shared arm64 rootfs and runs the session there as root, where qemu-user (binfmt_misc) runs its
arm64 programs. Those mounts exist only in the session's namespaces: they vanish with it.

`up` pins every host key it creates (no network trust-on-first-use) and registers the devices by
name: `lab-<arch>-<n>`, numbered per lab ($EDGEKIT_HOME) from 1, or names the user chooses.

The lab is a guest on this machine: it records each device's process tree (the pid and start
time of its root, see `reaper.py`) before it runs anything, and `down` ends only what is
recorded — never "every process of uid N" (that uid is the user's own).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Literal

from edgekit.config.devices import DeviceEntry, load_registry, save_registry
from edgekit.config.paths import edgekit_home, known_hosts_path
from edgekit.config.schema_base import Frozen, load_model_map, save_model_map
from edgekit.errors import ConfigError, EdgekitError, LabSetupError
from edgekit.lab.procs import Proc, alive, command_line, identify, send, tree
from edgekit.lab.rootfs import ensure_rootfs
from edgekit.toolchain.runner import run_tool
from edgekit.config.address import parse_address
from edgekit.transport.ssh import pin_host_key

PORT = 2222             # above 1024: an ordinary user's sshd may listen there
FIRST_OCTET = 10
SSHD = Path("/usr/sbin/sshd")
SFTP_SERVER = "/usr/lib/openssh/sftp-server"    # the same path on the host and in the rootfs
REAPER = Path(__file__).with_name("reaper.py")
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
# Where an aarch64 device's own folders appear inside the rootfs (device path → folder name)
ARM_BINDS = (("/root", "home"), ("/tmp", "tmp"), ("/var/tmp", "tmp"))
# a device's PATH (Debian's for root): not this machine's
DEVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class LabDevice(Frozen):
    name: str
    arch: Literal["x86_64", "aarch64"]
    host: str
    port: int
    user: str
    index: int              # the address is 127.0.0.(FIRST_OCTET + index)
    chroot: str = ""        # the rootfs of aarch64 devices ("" for x86_64)
    config_dir: str         # sshd config, host key, authorized_keys, enter, pid, log (host path)
    home: str               # the device's home directory, as the device sees it
    host_home: str = ""     # ... and on this machine ("" : the same path)
    uid: int = -1           # a device user created by an older, root-only lab (-1: none)
    pid: int = 0            # the host pid of the device's process tree root (reaper.py) ...
    pid_started: float = 0  # ... and its start time: a recycled pid is never taken for it

    @property
    def process(self) -> Proc:
        return Proc(self.pid, self.pid_started)

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def host_path(self, inside: str) -> Path:
        """A path as the device sees it → the same file on this machine."""
        path, own = PurePosixPath(inside), Path(self.host_home).parent
        binds = ARM_BINDS if self.chroot else ((self.home, "home"),)
        if not self.host_home:
            return Path(inside)
        for device_dir, folder in binds:
            if path == PurePosixPath(device_dir) or PurePosixPath(device_dir) in path.parents:
                return own / folder / path.relative_to(device_dir)
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


def up(arch: str = "x86_64", count: int = 1,
       on_progress: Callable[[str], None] | None = None,
       names: list[str] | None = None) -> list[LabDevice]:
    """Start `count` new devices of `arch` (named `names`, or `lab-<arch>-<n>` numbered per
    lab); returns them (running, keys pinned, registered)."""
    if not SSHD.exists():
        raise LabSetupError("OpenSSH server is not installed",
                            hint="as root, once: apt-get install openssh-server")
    devices = load_lab()
    names = _choose_names(arch, count, names, devices)
    _ensure_identity()
    _check_user_namespaces()
    chroot = str(ensure_rootfs(on_progress)) if arch == "aarch64" else ""
    started = []
    used = {d.index for d in devices.values()}
    for name in names:
        index = next((i for i in range(1, 240)
                      if i not in used and _free(f"127.0.0.{FIRST_OCTET + i}", PORT)), None)
        if index is None:
            raise LabSetupError(f"no free address left on 127.0.0.{FIRST_OCTET + 1}–249 "
                                f"port {PORT}", hint="stop some lab devices (edgekit lab down)")
        used.add(index)
        device = _plan(name, arch, index, chroot)
        devices[device.name] = device
        _save_lab(devices)        # recorded before anything is created: `down` can undo it
        try:
            _create(device)
            if on_progress:
                on_progress(f"starting {device.name} at {device.address}")
            device = _spawn(device)
            devices[device.name] = device
            _save_lab(devices)
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


def _check_user_namespaces() -> None:
    """Device sessions run in user namespaces: some kernels keep those from ordinary users."""
    try:
        proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        proc = subprocess.CompletedProcess([], 1, "", str(exc))
    if proc.returncode != 0:
        raise LabSetupError("this user cannot create user namespaces, which lab device "
                            f"sessions run in (unshare: {proc.stderr.strip()[-200:]})",
                            hint="as root: sysctl kernel.unprivileged_userns_clone=1, or on "
                                 "Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0")


def _choose_names(arch: str, count: int, names: list[str] | None,
                  devices: dict[str, LabDevice]) -> list[str]:
    """The names of the devices to start: given (checked), or the lowest free
    `lab-<arch>-<n>` of this lab — so a fresh lab's first devices are always `-1`, `-2`, …"""
    taken = set(devices) | set(load_registry())
    if names:
        for name in names:
            if not NAME.fullmatch(name):
                raise ConfigError(f"lab device name {name!r} is not a name: a letter, then "
                                  "letters, digits, '.', '_' or '-' (up to 63)", key="--name")
            if name in taken or names.count(name) > 1:
                raise ConfigError(f"a device named {name!r} is already registered",
                                  key="--name", hint="choose another name, or `edgekit lab "
                                                     "status` / `edgekit devices list`")
        return list(names)
    chosen = []
    for n in range(1, 10_000):
        if len(chosen) == count:
            break
        if f"lab-{arch}-{n}" not in taken:
            chosen.append(f"lab-{arch}-{n}")
    return chosen


def status() -> list[dict]:
    return [{**d.model_dump(), "address": d.address, "running": _running(d),
             "identity": str(identity_path())} for d in load_lab().values()]


def down(names: list[str] | None = None,
         on_progress: Callable[[str], None] | None = None) -> list[str]:
    """Stop lab devices (all, or those named) and remove their folders and registrations."""
    lab = load_lab()
    devices = {n: d for n, d in lab.items() if names is None or n in names}
    for device in devices.values():
        if on_progress:
            on_progress(f"stopping {device.name}")
        _stop(device)
        if device.uid >= 0 and on_progress:
            on_progress(f"{device.name} was started by an older edgekit lab as user "
                        f"{device.user} (uid {device.uid}): that user is left as it is "
                        f"(as root: userdel {device.user})")
        if device.uid < 0:                          # an older lab's folders are root's
            shutil.rmtree(Path(device.config_dir).parent, ignore_errors=True)
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


def _plan(name: str, arch: str, index: int, chroot: str) -> LabDevice:
    """The device's record: its address and paths; nothing is created yet."""
    own = lab_dir() / "devices" / name
    me = pwd.getpwuid(os.getuid())
    # the device's home is where the user's is (Ansible expands `~` to `~USER`, the passwd
    # home): its own folder is bound there in each session's mount namespace
    return LabDevice(name=name, arch=arch, host=f"127.0.0.{FIRST_OCTET + index}", port=PORT,
                     user=me.pw_name, index=index, chroot=chroot,
                     config_dir=str(own / "sshd"), home="/root" if chroot else me.pw_dir,
                     host_home=str(own / "home"))


def _create(device: LabDevice) -> None:
    """The device's folders, host key, authorized key, `enter` script and sshd config."""
    own = Path(device.config_dir).parent
    shutil.rmtree(own, ignore_errors=True)
    config = Path(device.config_dir)
    config.mkdir(parents=True, mode=0o700)
    Path(device.host_home).mkdir(mode=0o755)
    if device.chroot:
        (own / "tmp").mkdir(mode=0o1777)
    run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", device.name,
              "-f", str(config / "ssh_host_ed25519_key")], what="creating a device host key")
    shutil.copyfile(identity_path().with_suffix(".pub"), config / "authorized_keys")
    if device.chroot:       # the login user is root there, under the user's name too
        passwd = (Path(device.chroot) / "etc" / "passwd").read_text()
        if not any(ln.startswith(f"{device.user}:") for ln in passwd.splitlines()):
            passwd += f"{device.user}:x:0:0:{device.user}:{device.home}:/bin/sh\n"
        (config / "passwd").write_text(passwd)
    enter = config / "enter"
    enter.write_text(enter_script(device))
    enter.chmod(0o755)
    (config / "sshd_config").write_text(_sshd_config(device))


def enter_script(device: LabDevice) -> str:
    """The device's login: sshd runs it (ForceCommand) for every session, with the session's
    command in $SSH_ORIGINAL_COMMAND (SFTP: the SFTP server's path; a shell: empty)."""
    q = shlex.quote
    command = '"${SSH_ORIGINAL_COMMAND:-exec /bin/sh -l}"'
    if not device.chroot:
        # a user namespace (as root) to bind (recursively: a user namespace may not bind a tree
        # without the mounts under it) the device's home over the user's, then a nested
        # one back to the user's own uid; a fresh environment: the user's login shell ran
        # first (bash, run by sshd, reads ~/.bashrc), but a device has not this machine's PATH
        inner = (f"mount --rbind {q(device.host_home)} {q(device.home)} || exit 125; "
                 f"exec unshare --user --map-user={os.getuid()} --map-group={os.getgid()} "
                 f'--wd {q(device.home)} env -i HOME={q(device.home)} "USER=$USER" '
                 f'"LOGNAME=$LOGNAME" PATH={DEVICE_PATH} "TERM=$TERM" /bin/sh -c "$1"')
        return "\n".join([
            "#!/bin/sh", f"# edgekit lab: every session of {device.name} starts here",
            f"exec unshare --user --map-root-user --mount /bin/sh -c {q(inner)} sh {command}",
            ""])
    own = Path(device.host_home).parent
    binds = " && ".join(
        ['mount --rbind "$R" "$R"', 'mount -o remount,bind,ro "$R"']     # the rootfs: read-only
        + [f'mount --rbind /{d} "$R/{d}"' for d in ("dev", "proc", "sys")]
        + [f'mount --bind {q(str(own / folder))} "$R{inside}"' for inside, folder in ARM_BINDS]
        + [f'mount --bind {q(str(own / "sshd" / "passwd"))} "$R/etc/passwd"']
        + ['mount -t tmpfs -o mode=755 tmpfs "$R/run"'])
    inner = (f"R=$1; shift; {binds} || exit 125; "
             f"exec env -i HOME={q(device.home)} USER=root LOGNAME=root PATH={DEVICE_PATH} "
             f'"TERM=$TERM" unshare --root "$R" --wd {q(device.home)} /bin/sh -c "$@"')
    return "\n".join([
        "#!/bin/sh",
        f"# edgekit lab: every session of {device.name} starts here, in the arm64 rootfs: a",
        "# user namespace (this user as root) with its own mounts, gone with the session",
        f"exec unshare --user --map-root-user --mount /bin/sh -c {q(inner)} sh "
        f"{q(device.chroot)} {command}", ""])


def _sshd_config(device: LabDevice) -> str:
    d = device.config_dir
    return "\n".join([
        f"ListenAddress {device.host}", f"Port {device.port}",
        f"HostKey {d}/ssh_host_ed25519_key", f"AuthorizedKeysFile {d}/authorized_keys",
        f"PidFile {d}/sshd.pid", f"AllowUsers {device.user}", f"ForceCommand {d}/enter",
        # StrictModes would refuse a lab under a world-writable folder ($EDGEKIT_HOME in /tmp)
        "UsePAM no", "StrictModes no", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin prohibit-password", "PermitUserRC no", "PrintMotd no",
        "PrintLastLog no", "AllowAgentForwarding no", "AllowTcpForwarding no",
        "X11Forwarding no", f"Subsystem sftp {SFTP_SERVER}", "LogLevel VERBOSE", ""])


def _spawn(device: LabDevice) -> LabDevice:
    """Start the device's sshd below reaper.py (not daemonized: its whole process tree stays
    below the reaper); returns the device with the reaper's pid and start time."""
    if os.geteuid() == 0:           # root's sshd separates privileges there
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    config = Path(device.config_dir)
    argv = [str(SSHD), "-D", "-f", str(config / "sshd_config"), "-E", str(config / "sshd.log")]
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
    """This device's sshd listens (its log says so: a banner alone may come from another lab's
    sshd that took the address in between) and answers with its banner."""
    deadline = time.monotonic() + timeout
    log = Path(device.config_dir) / "sshd.log"
    listening = f"Server listening on {device.host} port {device.port}"
    while time.monotonic() < deadline:
        if device.pid and not alive(device.process):
            break                               # sshd (and so its reaper) ended
        try:
            if listening not in log.read_text():
                time.sleep(0.05)
                continue
            with socket.create_connection((device.host, device.port), timeout=5) as sock:
                sock.settimeout(10)
                if sock.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.3)
    raise LabSetupError(f"{device.name} did not start: no SSH banner on "
                        f"{device.host}:{device.port}",
                        hint=f"see {Path(device.config_dir) / 'sshd.log'}")


def _running(device: LabDevice) -> bool:
    return bool(device.pid) and alive(device.process)


def _stop(device: LabDevice) -> None:
    """End the device's process tree: sshd, its sessions and whatever they left running."""
    if not send(device.process, signal.SIGTERM):    # the reaper ends its tree, then itself
        return
    for _ in range(100):
        if not alive(device.process):
            return
        time.sleep(0.1)
    for proc in tree(device.process):               # a reaper that does not answer
        send(proc, signal.SIGKILL)
    send(device.process, signal.SIGKILL)


def _register(device: LabDevice) -> None:
    registry = load_registry()
    registry[device.name] = DeviceEntry(name=device.name, address=device.address,
                                        identity=str(identity_path()), arch=device.arch, lab=True)
    save_registry(registry)


def command_lines(device: LabDevice) -> list[str]:
    """The command lines of every process the device runs now (its tree below the reaper)."""
    lines = (command_line(proc) for proc in tree(device.process))
    return [line.strip() for line in lines if line is not None]
