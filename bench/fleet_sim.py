"""SIMULATED devices for bench/fleet_scale.py: the controller's own cost, nothing else.

A `SimulatedDevice` keeps a device's files in memory and answers the commands a deploy sends
(probe, provisioning checks, verify, run, activate, rm, the live-release check) the way the
real shims do on a healthy device, without running them: verification always passes, and
`run.sh` "computes" the golden outputs of the release. Uploaded files are kept by reference to
the controller's copy (10,000 devices must not hold 10,000 copies of the runtime). What this
measures is edgekit's controller — planning, journaling, waves, threads, comparisons of the
outputs it downloads — never a device, a network or the shims. Each device may take a fixed
time per command (`latency_s`, slept, not computed) to stand for a device's own work.
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import shlex
import sys
import threading
import time
from functools import lru_cache
from pathlib import Path

from edgekit.errors import RemoteCommandFailed
from edgekit.transport.base import RemoteEntry, RemoteResult

Ref = Path | bytes          # a file's content: the controller's file it came from, or bytes


@lru_cache(maxsize=None)
def _digest(path: Path, stamp: float) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_refs: dict[str, Path] = {}
_blobs: dict[bytes, bytes] = {}
LARGE = 256 * 1024


def _blob(data: bytes) -> bytes:
    return _blobs.setdefault(hashlib.sha256(data).digest(), data)


def _shared(local: Path) -> Path:
    return _refs.setdefault(str(local), local)


def _read(ref: Ref) -> bytes:
    return ref if isinstance(ref, bytes) else ref.read_bytes()


@lru_cache(maxsize=64)
def _manifest(path: Path, stamp: float) -> dict:
    return json.loads(path.read_bytes())


SIM_CPU = [0.0]          # CPU seconds the simulated devices' own Python took (all threads)
_cpu_lock = threading.Lock()


def _counted(method):
    """Add the method's CPU time (this thread's) to SIM_CPU: the simulation runs in the
    controller's process, and its cost is not the controller's."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        started = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent = time.thread_time() - started
            with _cpu_lock:
                SIM_CPU[0] += spent
    return wrapper


class SimulatedDevice:
    """One device's memory (files, links, directories), shared by its sessions."""

    def __init__(self, name: str, probe_stdout: bytes, latency_s: float = 0.0):
        self.name = name
        self.files: dict[str, Ref] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = {".edgekit"}
        self.probe_stdout = probe_stdout
        self.latency_s = latency_s
        self.lock = threading.Lock()
        self.commands = 0


class SimulatedTransport:
    """A session with a SimulatedDevice (the Transport protocol)."""

    def __init__(self, device: SimulatedDevice):
        self.device = device

    @property
    def where(self) -> str:
        return f"sim:{self.device.name}"

    def __enter__(self) -> SimulatedTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    # --- commands ---------------------------------------------------------------------------
    @_counted
    def run(self, argv, *, timeout=None, stdin=None, check=True,
            what="remote command failed") -> RemoteResult:
        d = self.device
        d.commands += 1
        if d.latency_s:
            time.sleep(d.latency_s)
        with d.lock:
            code, out = self._answer(list(argv))
        result = RemoteResult(code, out, b"" if code == 0 else b"simulated failure\n")
        if check and code != 0:
            raise RemoteCommandFailed(f"{what} ({shlex.join(argv)[:80]})", where=self.where,
                                      argv=list(argv), returncode=code, stderr_tail="")
        return result

    def _answer(self, argv: list[str]) -> tuple[int, bytes]:
        d = self.device
        if argv[:3] == ["sh", "-s", "--"]:                       # probe.sh on stdin
            return 0, d.probe_stdout
        if argv[:2] == ["sh", "-c"] and argv[3:4] == ["sha"]:    # provisioning: sha256 of files
            lines = [f"{self._sha(p)}  {p}\n" for p in argv[4:] if p in d.files]
            return 0, "".join(lines).encode()
        if argv[:2] == ["sh", "-c"] and argv[3:4] == ["live"]:   # releases.live_release
            link, release = d.links.get(argv[4], ""), argv[5]
            ok = link == f"releases/{release}" and self._isdir(argv[7])
            return (0 if ok else 3), f"{link}\n".encode()
        if argv[:2] == ["sh", "-n"] or argv[-1:] == ["--help"]:
            return 0, b""
        if argv[0] == "sh" and len(argv) > 1:
            shim = posixpath.basename(argv[1])
            if shim == "verify.sh":
                return (0 if self._isdir(argv[2]) else 1), b""
            if shim == "activate.sh":
                d.links[f"{argv[2]}/current"] = f"releases/{argv[3]}"
                return 0, b""
            if shim == "run.sh":
                return self._run(argv[3], argv[4], int(argv[5]))
            if shim == "hook.sh":
                return 0, b""
        if argv[:3] == ["rm", "-rf", "--"] or argv[:3] == ["rm", "-f", "--"]:
            for path in argv[3:]:
                self._remove(path)
            return 0, b""
        if argv[:2] == ["stat", "-f"]:
            return 0, b"1000000 4096 100000\n"
        raise NotImplementedError(f"the simulated device does not answer {argv[:3]}")

    def _run(self, release_dir: str, out_dir: str, sample: int) -> tuple[int, bytes]:
        """run.sh: the release's golden outputs of `sample`, as a right module writes them."""
        ref = self.device.files[f"{release_dir}/manifest.json"]
        manifest = (_manifest(ref, ref.stat().st_mtime) if isinstance(ref, Path)
                    else json.loads(ref))
        outputs = ([manifest["golden_outputs"]] +
                   [s["outputs"] for s in manifest.get("more_golden", [])])[sample]
        self.device.dirs.add(out_dir)
        for i, rel in enumerate(outputs):
            name = f"output_{i}.npy" if rel.endswith(".npy") else f"output_{i}.bin"
            self.device.files[f"{out_dir}/{name}"] = self.device.files[f"{release_dir}/{rel}"]
        return 0, b""

    # --- files ------------------------------------------------------------------------------
    @_counted
    def put(self, local: Path, remote: str) -> int:
        size = local.stat().st_size
        # a large file (the runtime's tools, from edgekit's cache) by reference; a small one
        # (bundle files, run.env, SHA256SUMS, signers: some from temporary folders) read now
        # and shared by content, so 10,000 devices hold one copy of each
        ref = _shared(local) if size > LARGE else _blob(local.read_bytes())
        with self.device.lock:
            self.device.files[sys.intern(remote)] = ref
        return size

    @_counted
    def get(self, remote: str, local: Path, *, max_bytes: int) -> int:
        data = _read(self._file(remote))
        if len(data) > max_bytes:
            raise RemoteCommandFailed(f"download refused: {remote} is over {max_bytes} bytes",
                                      where=self.where, argv=["get", remote], returncode=1,
                                      stderr_tail="")
        local.write_bytes(data)
        return len(data)

    @_counted
    def read_text(self, remote: str, *, max_bytes: int = 1 << 20) -> str | None:
        ref = self.device.files.get(remote)
        return None if ref is None else _read(ref)[:max_bytes].decode(errors="replace")

    @_counted
    def read_tail(self, remote: str, *, max_bytes: int = 1 << 20) -> str | None:
        ref = self.device.files.get(remote)
        return None if ref is None else _read(ref)[-max_bytes:].decode(errors="replace")

    @_counted
    def append_text(self, remote: str, text: str) -> None:
        with self.device.lock:
            old = self.device.files.get(remote, b"")
            self.device.files[remote] = _read(old) + text.encode()

    @_counted
    def replace_text(self, remote: str, text: str) -> None:
        with self.device.lock:
            self.device.files[sys.intern(remote)] = _blob(text.encode())

    @_counted
    def readlink(self, remote: str) -> str | None:
        return self.device.links.get(remote)

    @_counted
    def listdir(self, remote: str) -> list[RemoteEntry] | None:
        if not self._isdir(remote):
            return None
        prefix = remote.rstrip("/") + "/"
        names = {p[len(prefix):].split("/", 1)[0]
                 for p in (*self.device.files, *self.device.links, *self.device.dirs)
                 if p.startswith(prefix)}
        return [RemoteEntry(n, 0.0) for n in names]

    @_counted
    def mkdirs(self, remote: str) -> None:
        parts = remote.split("/")
        with self.device.lock:
            self.device.dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))

    @_counted
    def rename(self, old: str, new: str) -> None:
        d = self.device
        with d.lock:
            for table in (d.files, d.links):
                for path in [p for p in table if p == old or p.startswith(old + "/")]:
                    table[new + path[len(old):]] = table.pop(path)
            for path in [p for p in d.dirs if p == old or p.startswith(old + "/")]:
                d.dirs.discard(path)
                d.dirs.add(new + path[len(old):])

    @_counted
    def chmod(self, remote: str, mode: int) -> None:
        pass

    # --- helpers ----------------------------------------------------------------------------
    def _file(self, remote: str) -> Ref:
        try:
            return self.device.files[remote]
        except KeyError:
            raise RemoteCommandFailed(f"download failed: no such file {remote}",
                                      where=self.where, argv=["get", remote], returncode=2,
                                      stderr_tail="") from None

    def _sha(self, path: str) -> str:
        ref = self.device.files[path]
        if isinstance(ref, Path):
            return _digest(ref, ref.stat().st_mtime)
        return hashlib.sha256(ref).hexdigest()

    def _isdir(self, path: str) -> bool:
        link = self.device.links.get(path)
        if link is not None:
            path = posixpath.join(posixpath.dirname(path), link)
        return path in self.device.dirs

    def _remove(self, path: str) -> None:
        d = self.device
        for table in (d.files, d.links):
            for p in [p for p in table if p == path or p.startswith(path + "/")]:
                del table[p]
        for p in [p for p in d.dirs if p == path or p.startswith(path + "/")]:
            d.dirs.discard(p)
