"""The Debian arm64 userland for aarch64 lab devices: built once, without root, then cached
($EDGEKIT_ROOTFS_DIR, default $EDGEKIT_CACHE_DIR/lab/rootfs-arm64-bookworm) and shared by every
aarch64 lab device of this user.

It is built by `mmdebstrap --mode=auto` into a tarball (in a user namespace with the user's
subordinate uids when not root) and unpacked as the user: every file is then the user's, which
the device's user namespace shows as root's. Devices only read it: each device session sees it
read-only, with its own /root, /tmp and /run bound over it (see `devices.py`), so nothing is
mounted on this machine and nothing in the rootfs changes while devices run.

Running arm64 binaries needs qemu-user registered with binfmt_misc with the F flag (the
interpreter is opened at registration, so it works inside the rootfs): that is the one step
that needs root — installing qemu-user-static does it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from filelock import FileLock

from edgekit.config.paths import cache_root
from edgekit.errors import LabSetupError
from edgekit.toolchain.runner import run_tool

SUITE = "bookworm"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
READY_MARK = ".edgekit-rootfs-ready"
# the SFTP server (deploys), curl (the pull agent, agent.sh); a rootfs built without one of
# them (its program missing) is built again
PACKAGES = ("openssh-sftp-server", "curl")
PROGRAMS = ("usr/lib/openssh/sftp-server", "usr/bin/curl")
ROOT_SETUP = "as root, once: apt-get install qemu-user-static binfmt-support mmdebstrap uidmap"


def rootfs_path() -> Path:
    env = os.environ.get("EDGEKIT_ROOTFS_DIR")
    return Path(env) if env else cache_root() / "lab" / f"rootfs-arm64-{SUITE}"


def check_qemu_binfmt() -> None:
    """arm64 binaries must run through qemu from inside the rootfs: binfmt_misc's qemu-aarch64
    entry, enabled, with the F (fix binary) flag. Registering it is root's (machine-wide)."""
    entry = BINFMT / "qemu-aarch64"
    try:
        text = entry.read_text()
    except OSError:
        raise LabSetupError("arm64 programs cannot run here: qemu-aarch64 is not registered "
                            f"with binfmt_misc ({entry} is missing)", hint=ROOT_SETUP) from None
    flags = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("flags:")), "")
    if "enabled" not in text.splitlines()[:1] or "F" not in flags:
        raise LabSetupError(f"qemu-aarch64 in binfmt_misc is disabled or lacks the F flag "
                            f"({entry}: {text.splitlines()[:1]}, flags {flags!r})",
                            hint="as root: update-binfmts --enable qemu-aarch64 "
                                 "(qemu-user-static registers it with F)")


def apt_mirror() -> str | None:
    """The Debian archive this machine's apt uses (mmdebstrap's own default otherwise)."""
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


def build_argv(tarball: Path, mirror: str | None) -> list[str]:
    """mmdebstrap's command line: a minimal arm64 Debian with the SFTP server, as a tarball.
    Not root: mode unshare (the user's /etc/subuid range owns the files while it builds)."""
    return ["mmdebstrap", "--mode=auto", "--architectures=arm64", "--variant=minbase",
            f"--include={','.join(PACKAGES)}", "--format=tar", SUITE, str(tarball),
            *([mirror] if mirror else [])]


def _ready(root: Path) -> bool:
    return (root / READY_MARK).is_file() and all((root / p).exists() for p in PROGRAMS)


def ensure_rootfs(on_progress=None) -> Path:
    """The arm64 rootfs, built on first use (a few minutes), afterwards reused."""
    root = rootfs_path()
    check_qemu_binfmt()
    if _ready(root):
        return root
    if not shutil.which("mmdebstrap"):
        raise LabSetupError("mmdebstrap is not installed (it builds the arm64 userland)",
                            hint=ROOT_SETUP)
    root.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time: two first uses at once (two `lab up`s, two test workers) would
    # each clear the other's staging directory; the second waits, then finds it ready
    with FileLock(root.with_name(f".{root.name}.lock"), fallback_to_soft=False):
        if not _ready(root):
            _build(root, on_progress)
    return root


def _build(root: Path, on_progress) -> None:
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tarball = root.with_name(root.name + ".tar")
    if on_progress:
        on_progress("building the arm64 rootfs with mmdebstrap (once; a few minutes)")
    try:
        run_tool(build_argv(tarball, apt_mirror()), what="mmdebstrap of the arm64 rootfs",
                 timeout=1800, hint="needs Debian's package mirror, qemu-user-static and, "
                                    "when not root, a range in /etc/subuid and /etc/subgid "
                                    "(uidmap's newuidmap)")
        # unpacked as this user: the files become this user's (device nodes are not needed:
        # each device binds the host's /dev)
        run_tool(["tar", "-x", "--no-same-owner", "--exclude=./dev/*", "-f", str(tarball),
                  "-C", str(staging)], what="unpacking the arm64 rootfs")
    finally:
        tarball.unlink(missing_ok=True)
    (staging / READY_MARK).write_text("ok\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
