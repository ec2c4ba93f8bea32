"""`edgekit provision`: the IREE runtime tools of exactly the compiler's version for the device's
arch, plus the device-side shims. Idempotent (files whose sha256 already match are not sent) and
verified by running the installed tools on the device.

The tools come from the `iree-base-runtime` wheel for the device's platform, fetched with pip on
the host and cached; they need only glibc, libstdc++ and libgcc_s on the device (no Python).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import json
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.paths import cache_root, edgekit_home
from edgekit.config.profiles import host_arch
from edgekit.device import layout
from edgekit.device.probe import SHIMS, DeviceInfo
from edgekit.errors import ConfigError, DeviceIncompatible
from edgekit.models.bundle import sha256_file
from edgekit.toolchain.runner import run_tool
from edgekit.toolchain.versions import iree_runtime_version
from edgekit.transport.base import Transport

TOOLS = ("iree-run-module", "iree-benchmark-module", "iree-cpuinfo")
SHIM_FILES = ("probe.sh", "verify.sh", "activate.sh", "run.sh", "bench.sh", "conditions.sh",
              "hook.sh", "install_bundle.sh", "release_steps.sh", "runs.sh")
WHEEL_PLATFORM = {"aarch64": "manylinux_2_28_aarch64", "x86_64": "manylinux_2_28_x86_64"}


@dataclass(frozen=True)
class ProvisionResult:
    runtime_dir: str
    shims_dir: str
    uploaded: tuple[str, ...]
    uploaded_bytes: int


@functools.cache
def shim_version() -> str:
    """A digest of the shims' names and contents: the installed package's files, read once
    per process (a rollout asks for it several times per device)."""
    digest = hashlib.sha256()
    for name in SHIM_FILES:
        digest.update(name.encode() + b"\0" + (SHIMS / name).read_bytes())
    return digest.hexdigest()[:12]


def runtime_tools(arch: str, version: str) -> Path:
    """Local directory with the device tools for `arch` at `version` (fetched once, cached).
    A cached tool is used only when its sha256 is the toolchain's record: the installed
    runtime package's own files for this machine's arch, else the digests this edgekit home
    recorded when it fetched them (in $EDGEKIT_HOME, private) — a tool swapped in the cache is
    refused, and a cache directory others may write is refused outright."""
    if arch not in WHEEL_PLATFORM:
        raise DeviceIncompatible(f"no IREE runtime build for arch {arch}",
                                 hint=f"supported: {', '.join(WHEEL_PLATFORM)}")
    bin_dir = cache_root() / "runtime" / f"iree-{version}-{arch}" / "bin"
    _refuse_shared(bin_dir)
    record = _tool_record(arch, version)
    if record is not None and all((bin_dir / t).is_file() for t in TOOLS):
        _check_tools(bin_dir, record)
        return bin_dir
    staging = Path(tempfile.mkdtemp(prefix="edgekit-runtime-"))
    try:
        if _from_this_python(arch, version):
            import iree._runtime_libs as libs
            for tool in TOOLS:
                shutil.copy2(Path(libs.__file__).parent / tool, staging / tool)
        else:
            _extract_from_wheel(arch, version, staging)
        fetched = {tool: sha256_file(staging / tool) for tool in TOOLS}
        if record is not None and fetched != record:
            raise ConfigError(
                f"the IREE {version} tools for {arch} fetched now differ from those recorded "
                "when they were first fetched", key="EDGEKIT_CACHE_DIR",
                hint=f"remove {_record_path(arch, version)} to trust the new download")
        bin_dir.parent.mkdir(parents=True, exist_ok=True)
        _publish(staging, bin_dir)       # another copy published first is kept: checked next
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _check_tools(bin_dir, fetched)
    if not _from_this_python(arch, version):
        _record_path(arch, version).parent.mkdir(parents=True, exist_ok=True)
        _record_path(arch, version).write_text(json.dumps(fetched, indent=1))
    return bin_dir


def _from_this_python(arch: str, version: str) -> bool:
    return arch == host_arch() and version == iree_runtime_version()


def _record_path(arch: str, version: str) -> Path:
    return edgekit_home() / "toolchain-records" / f"iree-{version}-{arch}.json"


def _tool_record(arch: str, version: str) -> dict[str, str] | None:
    """The sha256 each tool must have: the installed runtime package's files (this machine's
    arch and version), else what this home recorded when it fetched them; None: no record."""
    if _from_this_python(arch, version):
        import iree._runtime_libs as libs
        return {tool: sha256_file(Path(libs.__file__).parent / tool) for tool in TOOLS}
    try:
        found = json.loads(_record_path(arch, version).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and set(found) == set(TOOLS) else None


def _check_tools(bin_dir: Path, record: dict[str, str]) -> None:
    swapped = [tool for tool in TOOLS if sha256_file(bin_dir / tool) != record[tool]]
    if swapped:
        raise ConfigError(
            f"cached {', '.join(swapped)} in {bin_dir} differ from the toolchain's record "
            "(sha256): not provisioned to any device", key="EDGEKIT_CACHE_DIR",
            hint=f"remove {bin_dir.parent} (it is fetched again), and find out who changed it")


def _refuse_shared(bin_dir: Path) -> None:
    """The tool cache and the folders above it up to the cache root: no one else may write
    them (group or world write, without the sticky bit of a shared /tmp)."""
    root = cache_root()
    for folder in (bin_dir, *bin_dir.parents):
        try:
            mode = folder.stat().st_mode
        except OSError:
            mode = 0
        if mode & 0o022 and not mode & stat.S_ISVTX:
            raise ConfigError(f"the tool cache {folder} is writable by others (mode "
                              f"{stat.S_IMODE(mode):o}): its tools are not deployed",
                              key="EDGEKIT_CACHE_DIR",
                              hint=f"chmod go-w {folder}, or point EDGEKIT_CACHE_DIR at a "
                                   "directory only you can write")
        if folder == root or root not in folder.parents:
            break


def _publish(staging: Path, bin_dir: Path) -> None:
    """Rename `staging` to `bin_dir`, whole. Another edgekit fetching the same tools at the
    same time may have published first: its complete copy is kept (never removed while it may
    be read); an incomplete one is moved aside, then replaced."""
    try:
        staging.rename(bin_dir)
        return
    except OSError:
        if all((bin_dir / t).is_file() for t in TOOLS):
            return
    aside = Path(tempfile.mkdtemp(prefix=".stale-", dir=bin_dir.parent))
    bin_dir.rename(aside / "bin")
    shutil.rmtree(aside, ignore_errors=True)
    staging.rename(bin_dir)


def _extract_from_wheel(arch: str, version: str, into: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="edgekit-wheel-") as tmp:
        run_tool([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                  "--only-binary=:all:", "--platform", WHEEL_PLATFORM[arch],
                  "--python-version", "3.11", "--dest", tmp, f"iree-base-runtime=={version}"],
                 what=f"downloading the IREE runtime {version} for {arch}",
                 hint="the host needs to reach the Python package index once; the tools are "
                      "cached afterwards")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            for tool in TOOLS:
                with zf.open(f"iree/_runtime_libs/{tool}") as src, (into / tool).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                (into / tool).chmod(0o755)


def provision(conn: Transport, info: DeviceInfo, version: str | None = None) -> ProvisionResult:
    version = version or iree_runtime_version()
    local_bin = runtime_tools(info.arch, version)
    runtime = layout.runtime_dir(version, info.arch)
    shims = layout.shims_dir(shim_version())
    uploaded: list[str] = []
    sent = 0
    for local_dir, remote_dir, names in ((local_bin, f"{runtime}/bin", TOOLS),
                                         (SHIMS, shims, SHIM_FILES)):
        sent += sync_files(conn, [(local_dir / n, f"{remote_dir}/{n}") for n in names],
                           uploaded, mode=0o755)
    # Verified by running: the tools execute on this device, the shims parse.
    conn.run([f"{runtime}/bin/iree-run-module", "--help"],
             what="the installed iree-run-module does not run on the device")
    conn.run(["sh", "-n", f"{shims}/run.sh"], what="the installed shims do not parse")
    return ProvisionResult(runtime, shims, tuple(uploaded), sent)


def sync_files(conn: Transport, pairs: list[tuple[Path, str]], uploaded: list[str],
               mode: int = 0o644) -> int:
    """Upload files whose remote sha256 differs (written under a temporary name, then renamed).
    Returns bytes sent; appends remote paths sent to `uploaded`."""
    remote_sums = remote_sha256(conn, [remote for _, remote in pairs])
    sent = 0
    for local, remote in pairs:
        if remote_sums.get(remote) == sha256_file(local):
            continue
        conn.mkdirs(remote.rsplit("/", 1)[0])
        tmp = f"{remote}.{secrets.token_hex(4)}.partial"   # its own: deploys run at once
        sent += conn.put(local, tmp)
        conn.chmod(tmp, mode)
        conn.rename(tmp, remote)
        uploaded.append(remote)
    return sent


def remote_sha256(conn: Transport, paths: list[str]) -> dict[str, str]:
    """sha256 of the remote files that exist (missing ones are simply absent)."""
    result = conn.run(["sh", "-c", 'for f; do [ -f "$f" ] && sha256sum "$f"; done; exit 0',
                       "sha", *paths], what="reading checksums on the device")
    sums = {}
    for line in result.text.splitlines():
        digest, _, path = line.partition("  ")
        sums[path] = digest
    return sums


def needs_provisioning(info: DeviceInfo, version: str | None = None) -> bool:
    version = version or iree_runtime_version()
    return (f"iree-{version}-{info.arch}" not in info.runtimes
            or shim_version() not in info.shims)


