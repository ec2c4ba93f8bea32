"""The Debian arm64 userland for aarch64 lab devices: built once with debootstrap, then cached
($EDGEKIT_ROOTFS_DIR, default $EDGEKIT_CACHE_DIR/lab/rootfs-arm64-bookworm) and shared by every
aarch64 lab device."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.errors import LabSetupError
from edgekit.toolchain.runner import run_tool

SUITE = "bookworm"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
READY_MARK = ".edgekit-rootfs-ready"


def rootfs_path() -> Path:
    env = os.environ.get("EDGEKIT_ROOTFS_DIR")
    return Path(env) if env else cache_root() / "lab" / f"rootfs-arm64-{SUITE}"


def ensure_qemu_binfmt() -> None:
    """arm64 binaries must run through qemu (binfmt_misc with the F flag, so inside a chroot)."""
    if not (BINFMT / "register").exists():
        run_tool(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
                 what="mounting binfmt_misc", hint="the lab needs root")
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists() or "enabled" not in entry.read_text():
        if not shutil.which("update-binfmts"):
            raise LabSetupError("qemu user emulation is not installed",
                                hint="apt-get install qemu-user-static binfmt-support debootstrap")
        run_tool(["update-binfmts", "--enable", "qemu-aarch64"], what="enabling qemu-aarch64")


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
    ensure_qemu_binfmt()
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
