"""A device that is a directory on this machine: `LocalTransport(root)`.

The directory plays the device user's home: `~/…` and relative remote paths land under it, and
commands run as real processes (through `/bin/sh -c`, as sshd runs them) with HOME and the
working directory set to it — so the shims, the provisioned IREE tools and the deploy layout
are exactly those of an SSH device, minus SSH. What it reports (the probe, the benchmarks) is
this machine's. Used for fast tests of deploy, rollback and fleet logic, and by
`--host local:/dir`. OS errors become the same typed errors as over SSH (transport.base).
"""

from __future__ import annotations

import errno
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from edgekit.config.timeouts import Timeouts
from edgekit.errors import DeviceAnswerRefused, DeviceUnreachable, RemoteCommandFailed
from edgekit.transport.base import (SPACE_HINT, TAIL_MAX_BYTES, TEXT_MAX_BYTES,
                                    BoundedOutput, RemoteEntry, RemoteResult, file_op_failed,
                                    out_of_space, refuse_unless_regular, space_left, tail_text,
                                    too_large, transfer_deadline)


class LocalTransport:
    """A `Transport` to the directory `root` (which must exist: it is the device)."""

    def __init__(self, root: Path, name: str | None = None, timeouts: Timeouts | None = None):
        self.root = Path(root).absolute()
        self.timeouts = timeouts or Timeouts()
        self._where = name or f"local:{self.root}"
        self._closed = False
        if not self.root.is_dir():
            raise DeviceUnreachable(f"no device directory {self.root}", where=self._where,
                                    hint="a local device is an existing directory (its home)")

    @property
    def where(self) -> str:
        return self._where

    def __enter__(self) -> "LocalTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            stdin: bytes | None = None, check: bool = True,
            what: str = "remote command failed") -> RemoteResult:
        # A program `put` just wrote can be "busy" (ETXTBSY, sh's exit 126) for a moment: a
        # process this one forked for another device meanwhile holds a copy of the writing
        # descriptor until its own exec. A device over SSH has no such sibling; here the
        # command is tried again (1 deploy in 500 local: devices at once hit it).
        for attempt in range(5):
            result = self._run_once(argv, timeout, stdin)
            if not (result.returncode == 126 and b"Text file busy" in result.stderr):
                break
            time.sleep(0.05 * (attempt + 1))
        if check and result.returncode != 0:
            raise RemoteCommandFailed(what, where=self.where, argv=list(argv),
                                      returncode=result.returncode,
                                      stderr_tail=(result.stderr or result.stdout)
                                      [-3000:].decode(errors="replace"))
        return result

    def _run_once(self, argv: Sequence[str], timeout: float | None,
                  stdin: bytes | None) -> RemoteResult:
        self._check_open()
        timeout = self.timeouts.command_s if timeout is None else timeout
        command = shlex.join(argv)
        # a login's environment, not edgekit's own settings (EDGEKIT_DRIVER steers bench.sh)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDGEKIT_")}
        env.update(HOME=str(self.root), PWD=str(self.root))
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=self.root, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise DeviceUnreachable(f"cannot start a process in {self.root}: {exc}",
                                    where=self.where) from None
        out, err = BoundedOutput(), BoundedOutput()
        # threads, not communicate(): that would keep all of a flood of output in memory
        pumps = [threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True),
                 threading.Thread(target=_pump, args=(proc.stderr, err), daemon=True),
                 threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True)]
        for pump in pumps:
            pump.start()
        deadline = time.monotonic() + timeout
        for pump in pumps:  # output ends when the command and all it started have exited
            pump.join(max(0.0, deadline - time.monotonic()))
        try:
            if any(pump.is_alive() for pump in pumps):
                raise subprocess.TimeoutExpired(command, timeout)
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the shim and what it started
            except ProcessLookupError:
                pass
            proc.wait()
            for pump in pumps:  # a process that left the group may keep a pipe open
                pump.join(5)
            raise RemoteCommandFailed(f"timed out after {timeout:.0f} s", where=self.where,
                                      argv=[command], returncode=124,
                                      stderr_tail=err.getvalue()[-3000:].decode(
                                          errors="replace")) from None
        return RemoteResult(proc.returncode, out.getvalue(), err.getvalue(),
                            stdout_cut=out.cut, stderr_cut=err.cut)

    def put(self, local: Path, remote: str) -> int:
        self._file_op("upload", [str(local), remote],
                      lambda: shutil.copyfile(local, self._path(remote)))
        return local.stat().st_size

    def get(self, remote: str, local: Path, *, max_bytes: int) -> int:
        deadline = time.monotonic() + transfer_deadline(self.timeouts.sftp_s, max_bytes)

        def copy() -> int:
            got = 0
            with self._open_regular(remote, max_bytes) as src, open(local, "wb") as dst:
                while chunk := src.read(min(1 << 20, max_bytes + 1 - got)):
                    got += len(chunk)
                    if got > max_bytes:
                        raise too_large(self.where, remote, f"over {max_bytes:,} bytes "
                                        "(it grew while it was read)", max_bytes)
                    dst.write(chunk)
                    if time.monotonic() > deadline:
                        raise DeviceUnreachable(
                            f"download of {remote}: not done within its deadline "
                            f"({transfer_deadline(self.timeouts.sftp_s, max_bytes):g} s for "
                            f"{max_bytes:,} bytes)", where=self.where)
            return got
        try:
            return self._file_op("download", [remote, str(local)], copy)
        except BaseException:
            local.unlink(missing_ok=True)
            raise

    def read_text(self, remote: str, *, max_bytes: int = TEXT_MAX_BYTES) -> str | None:
        def read() -> bytes:
            with self._open_regular(remote, max_bytes) as f:
                data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise too_large(self.where, remote, f"over {max_bytes:,} bytes", max_bytes)
            return data
        data = self._file_op("read", [remote], read, absent_ok=True)
        return None if data is None else data.decode(errors="replace")

    def read_tail(self, remote: str, *, max_bytes: int = TAIL_MAX_BYTES) -> str | None:
        def read() -> str:
            with self._open_regular(remote, None) as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - max_bytes))
                return tail_text(f.read(max_bytes), size > max_bytes)
        return self._file_op("read", [remote], read, absent_ok=True)

    def _open_regular(self, remote: str, max_bytes: int | None) -> IO[bytes]:
        """`remote` opened for reading if it is a regular file (of at most `max_bytes`): a
        link is not followed (O_NOFOLLOW), a FIFO does not block the open (O_NONBLOCK)."""
        path = self._path(remote)
        limit = max_bytes if max_bytes is not None else float("inf")
        st = os.lstat(path)
        refuse_unless_regular(self.where, remote, st.st_mode, st.st_size, limit)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ELOOP:   # made a link since lstat
                raise DeviceAnswerRefused(f"{remote} on the device is a symlink, not a "
                                          "regular file; not read", where=self.where) from None
            raise
        f = os.fdopen(fd, "rb")
        st = os.fstat(fd)   # the file opened, whatever the path names now
        try:
            refuse_unless_regular(self.where, remote, st.st_mode, st.st_size, limit)
        except BaseException:
            f.close()
            raise
        return f

    def append_text(self, remote: str, text: str) -> None:
        def append() -> None:
            with self._path(remote).open("ab") as f:
                f.write(text.encode())
        self._file_op("append", [remote], append)

    def replace_text(self, remote: str, text: str) -> None:
        staging = f"{remote}.{secrets.token_hex(4)}"
        self._file_op("write", [staging], lambda: self._path(staging).write_bytes(text.encode()))
        self.rename(staging, remote)

    def readlink(self, remote: str) -> str | None:
        return self._file_op("readlink", [remote], lambda: os.readlink(self._path(remote)),
                             absent_ok=True)

    def listdir(self, remote: str) -> list[RemoteEntry] | None:
        def entries() -> list[RemoteEntry]:
            with os.scandir(self._path(remote)) as it:
                return [RemoteEntry(e.name, e.stat(follow_symlinks=False).st_mtime) for e in it]
        return self._file_op("listdir", [remote], entries, absent_ok=True)

    def mkdirs(self, remote: str) -> None:
        self._file_op("mkdir", [remote],
                      lambda: self._path(remote).mkdir(parents=True, exist_ok=True))

    def rename(self, old: str, new: str) -> None:
        self._file_op("rename", [old, new], lambda: os.rename(self._path(old), self._path(new)))

    def chmod(self, remote: str, mode: int) -> None:
        self._file_op("chmod", [oct(mode), remote], lambda: os.chmod(self._path(remote), mode))

    def _path(self, remote: str) -> Path:
        if remote == "~" or remote.startswith("~/"):
            remote = remote[2:]
        path = Path(remote)
        return path if path.is_absolute() else self.root / path

    def _file_op(self, op: str, paths: list[str], action, *, absent_ok: bool = False):
        self._check_open()
        try:
            return action()
        except FileNotFoundError as exc:
            if absent_ok:
                return None
            raise file_op_failed(self.where, op, paths, exc) from None
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):   # the docs' words: space or inodes
                full = out_of_space(space_left(self, paths[-1]), 1)
                if full:
                    raise file_op_failed(self.where, op, paths,
                                         OSError(errno.ENOSPC, f"{full} ({paths[-1]})"),
                                         hint=SPACE_HINT) from None
            raise file_op_failed(self.where, op, paths, exc) from None

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceUnreachable("the connection to the device is closed", where=self.where)


def _pump(pipe: IO[bytes], sink: BoundedOutput) -> None:
    with pipe:
        while chunk := pipe.read1(65536):
            sink.write(chunk)


def _feed(pipe: IO[bytes], data: bytes | None) -> None:
    try:
        with pipe:
            if data:
                pipe.write(data)
    except BrokenPipeError:
        pass  # the command exited without reading its input: its exit status says what happened
