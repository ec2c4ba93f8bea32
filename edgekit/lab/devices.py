"""`edgekit lab up|status|down`: devices that are real OpenSSH servers on 127.0.0.x.

Each device has its own address, host key, login user (with its own home: the device's disk)
and authorized key. x86_64 devices are users of this machine (Mesa's llvmpipe gives them a
Vulkan device); aarch64 devices live in the shared arm64 rootfs and run its arm64 sshd under
qemu. `up` pins every host key it creates (no network trust-on-first-use) and registers the
devices by name, so `--host lab-aarch64-1` works.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from edgekit.config.devices import DeviceEntry, load_registry, save_registry
from edgekit.config.paths import edgekit_home, known_hosts_path
from edgekit.config.schema_base import Frozen, load_model_map, save_model_map
from edgekit.errors import LabSetupError
from edgekit.lab.rootfs import ensure_rootfs
from edgekit.toolchain.runner import run_tool
from edgekit.config.address import parse_address
from edgekit.transport.ssh import pin_host_key

PORT = 2222
FIRST_OCTET = 10
HOMES = Path("/srv/edgekit-lab")   # world-traversable, so device users can reach their homes


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
    if chroot:
        _mount_pseudo_filesystems(Path(chroot))
    devices = load_lab()
    started = []
    used = {d.index for d in devices.values()}
    for _ in range(count):
        index = next(i for i in range(1, 240)
                     if i not in used and _free(f"127.0.0.{FIRST_OCTET + i}", PORT))
        used.add(index)
        device = _create(arch, index, chroot)
        if on_progress:
            on_progress(f"starting {device.name} at {device.address}")
        _start(device)
        devices[device.name] = device
        _save_lab(devices)
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
        _remove_user(device)
        shutil.rmtree(device.host_path(device.home), ignore_errors=True)
        shutil.rmtree(Path(device.config_dir), ignore_errors=True)
    remaining = {n: d for n, d in lab.items() if n not in devices}
    for chroot in {d.chroot for d in devices.values() if d.chroot}:
        if not any(d.chroot == chroot for d in remaining.values()):
            _unmount_pseudo_filesystems(Path(chroot))
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


def _create(arch: str, index: int, chroot: str) -> LabDevice:
    name = f"lab-{arch}-{index}"
    user = f"ekd{_lab_id()[:4]}{index}"
    inside = f"/srv/edgekit-lab/{_lab_id()}/{name}"
    device = LabDevice(name=name, arch=arch, host=f"127.0.0.{FIRST_OCTET + index}", port=PORT,
                       user=user, index=index, chroot=chroot,
                       config_dir=str(Path(chroot + inside) / "sshd"),
                       home=f"{inside}/home")
    config = Path(device.config_dir)
    shutil.rmtree(config, ignore_errors=True)
    config.mkdir(parents=True)
    os.chmod(Path(chroot + inside), 0o755)
    for parent in Path(chroot + inside).parents:
        if str(parent).startswith(str(Path(chroot + "/srv"))):
            os.chmod(parent, 0o755)
    run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
              "-f", str(config / "ssh_host_ed25519_key")], what="creating a device host key")
    shutil.copyfile(identity_path().with_suffix(".pub"), config / "authorized_keys")
    _add_user(device)
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


def _add_user(device: LabDevice) -> None:
    root = ["-R", device.chroot] if device.chroot else []
    _remove_user(device)
    run_tool(["useradd", *root, "--home-dir", device.home, "--create-home", "--shell", "/bin/sh",
              device.user], what=f"creating the device user {device.user}")
    # '*' (no password) instead of useradd's '!' (locked): sshd without PAM refuses locked users
    run_tool(["usermod", *root, "-p", "*", device.user], what="unlocking the device user")


def _remove_user(device: LabDevice) -> None:
    root = ["-R", device.chroot] if device.chroot else []
    passwd = Path(device.chroot + "/etc/passwd")
    entry = next((line.split(":") for line in passwd.read_text().splitlines()
                  if line.startswith(f"{device.user}:")), None)
    if entry is None:
        return
    # sessions a client keeps open (e.g. Ansible's ControlPersist) outlive sshd's listener
    # and would make userdel refuse
    subprocess.run(["pkill", "-KILL", "-U", entry[2]], check=False)
    for _ in range(50):
        if subprocess.run(["pgrep", "-U", entry[2]], capture_output=True).returncode != 0:
            break
        time.sleep(0.1)
    run_tool(["userdel", *root, device.user], what=f"removing the device user {device.user}")


def _start(device: LabDevice) -> None:
    config = Path(device.config_dir)
    inside = device.config_dir.removeprefix(device.chroot)
    device.host_path("/run/sshd").mkdir(parents=True, exist_ok=True)
    argv = ["/usr/sbin/sshd", "-f", f"{inside}/sshd_config", "-E", f"{inside}/sshd.log"]
    if device.chroot:
        argv = ["chroot", device.chroot, *argv]
    run_tool(argv, what=f"starting sshd for {device.name}",
             hint=f"see {config / 'sshd.log'}")
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


def _pid(device: LabDevice) -> int | None:
    try:
        return int((Path(device.config_dir) / "sshd.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _running(device: LabDevice) -> bool:
    pid = _pid(device)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _stop(device: LabDevice) -> None:
    """Stop the device's listening sshd; its open sessions end with their connections."""
    pid = _pid(device)
    if pid is None or not _running(device):
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not _running(device):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def _register(device: LabDevice) -> None:
    registry = load_registry()
    registry[device.name] = DeviceEntry(name=device.name, address=device.address,
                                        identity=str(identity_path()), arch=device.arch, lab=True)
    save_registry(registry)


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    return any(line.split()[1] == target for line in Path("/proc/mounts").read_text().splitlines())


def _mount_pseudo_filesystems(root: Path) -> None:
    if not _mounted(root / "proc"):
        run_tool(["mount", "-t", "proc", "proc", str(root / "proc")], what="mounting /proc")
    if not _mounted(root / "dev"):
        run_tool(["mount", "--bind", "/dev", str(root / "dev")], what="mounting /dev")


def _unmount_pseudo_filesystems(root: Path) -> None:
    for sub in ("dev", "proc"):
        if _mounted(root / sub):
            run_tool(["umount", "-l", str(root / sub)], what=f"unmounting {sub}")
