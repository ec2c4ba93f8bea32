"""The Debian arm64 userland for aarch64 lab devices: built once with debootstrap, then cached
($EDGEKIT_ROOTFS_DIR, default $EDGEKIT_CACHE_DIR/lab/rootfs-arm64-bookworm) and shared by every
aarch64 lab device — of every lab on this machine (other $EDGEKIT_HOMEs, test sessions).

Its /proc and /dev mounts are therefore shared too: each device that runs in the rootfs holds
them (a holder file next to the rootfs names the device, its lab's home and the pid + start
time of the device's process tree), and they are unmounted when the last live holder lets go —
and only those the lab mounted itself (a mount that was there before stays).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.errors import LabSetupError
from edgekit.lab.procs import Proc, alive
from edgekit.toolchain.runner import run_tool

SUITE = "bookworm"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
READY_MARK = ".edgekit-rootfs-ready"


def rootfs_path() -> Path:
    env = os.environ.get("EDGEKIT_ROOTFS_DIR")
    return Path(env) if env else cache_root() / "lab" / f"rootfs-arm64-{SUITE}"


def ensure_qemu_binfmt(on_progress=None) -> None:
    """arm64 binaries must run through qemu (binfmt_misc with the F flag, so inside a chroot).
    Done only when missing, and left as it is afterwards: it is machine-wide (other labs and
    programs use it) and the same state installing qemu-user-static gives at boot."""
    if not (BINFMT / "register").exists():
        run_tool(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                 what="mounting binfmt_misc", hint="the lab needs root")
        if on_progress:
            on_progress(f"mounted binfmt_misc on {BINFMT} (left mounted)")
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists() or "enabled" not in entry.read_text():
        if not shutil.which("update-binfmts"):
            raise LabSetupError("qemu user emulation is not installed",
                                hint="apt-get install qemu-user-static binfmt-support debootstrap")
        run_tool(["update-binfmts", "--enable", "qemu-aarch64"], what="enabling qemu-aarch64")
        if on_progress:
            on_progress("enabled qemu-aarch64 in binfmt_misc (left enabled)")


def apt_mirror() -> str | None:
    """The Debian archive this machine's apt uses (debootstrap's own default otherwise)."""
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and "security" not in parts[1]:
                return parts[1]
    return None


def ensure_rootfs(on_progress=None) -> Path:
    """The arm64 rootfs, built on first use (a few minutes), afterwards reused."""
    root = rootfs_path()
    ensure_qemu_binfmt(on_progress)
    if (root / READY_MARK).is_file():
        return root
    if not shutil.which("debootstrap"):
        raise LabSetupError("debootstrap is not installed",
                            hint="apt-get install qemu-user-static binfmt-support debootstrap")
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    if on_progress:
        on_progress("building the arm64 rootfs with debootstrap (once; a few minutes)")
    mirror = [m for m in [apt_mirror()] if m]
    run_tool(["debootstrap", "--arch=arm64", "--variant=minbase",
              "--include=openssh-server,openssh-sftp-server", SUITE, str(staging), *mirror],
             what="debootstrap of the arm64 rootfs", timeout=1800,
             hint="needs Debian's package mirror and qemu-user-static")
    (staging / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    (staging / READY_MARK).write_text("ok\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root


# (mount point inside the rootfs, how to mount it)
PSEUDO_FILESYSTEMS = (("proc", ["-t", "proc", "proc"]), ("dev", ["--bind", "/dev"]))
OURS = "mounted-by-edgekit.json"     # the mount points the lab mounted (and so may unmount)


def mounts_dir(root: Path) -> Path:
    """Holder files, the lock and the record of what the lab mounted: next to the rootfs."""
    return root.with_name(root.name + ".mounts")


@contextmanager
def _locked(root: Path) -> Iterator[Path]:
    folder = mounts_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # released when the file is closed
        yield folder


def _holder_file(folder: Path, holder: str) -> Path:
    return folder / f"holder-{holder}.json"


def _live_holders(folder: Path) -> list[str]:
    """Holders whose process still runs; files of dead ones (a lab that crashed) are removed."""
    live = []
    for path in sorted(folder.glob("holder-*.json")):
        try:
            record = json.loads(path.read_text())
            proc = Proc(int(record["pid"]), int(record["started"]))
        except (OSError, ValueError, KeyError, TypeError):
            proc = Proc(0, 0)
        if alive(proc):
            live.append(path.name.removeprefix("holder-").removesuffix(".json"))
        else:
            path.unlink(missing_ok=True)
    return live


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    return any(line.split()[1] == target for line in Path("/proc/mounts").read_text().splitlines())


def _ours(folder: Path) -> set[str]:
    path = folder / OURS
    return set(json.loads(path.read_text())) if path.is_file() else set()


def hold_mounts(root: Path, holder: str, *, home: str, proc: Proc) -> None:
    """Mount /proc and /dev inside `root` unless they are mounted, and record `holder` (one
    lab device) as using them while `proc` lives. Calling it again updates the record."""
    with _locked(root) as folder:
        record = {"home": home, "holder": holder, "pid": proc.pid, "started": proc.started}
        _holder_file(folder, holder).write_text(json.dumps(record) + "\n")
        ours = _ours(folder)
        for sub, how in PSEUDO_FILESYSTEMS:
            if not _mounted(root / sub):
                run_tool(["mount", *how, str(root / sub)], what=f"mounting /{sub} in {root}")
                ours.add(sub)
        (folder / OURS).write_text(json.dumps(sorted(ours)) + "\n")


def release_mounts(root: Path, holder: str) -> list[str]:
    """`holder` no longer uses the mounts; unmount those the lab mounted when no live holder
    (of any lab) is left. Returns what was unmounted."""
    with _locked(root) as folder:
        _holder_file(folder, holder).unlink(missing_ok=True)
        if _live_holders(folder):
            return []
        ours = _ours(folder)
        unmounted = []
        for sub, _ in reversed(PSEUDO_FILESYSTEMS):
            if sub in ours and _mounted(root / sub):
                run_tool(["umount", "-l", str(root / sub)], what=f"unmounting /{sub} in {root}")
                unmounted.append(sub)
        (folder / OURS).unlink(missing_ok=True)
        return unmounted
