"""What device code needs from a device: the `Transport` protocol, and its plain records.

Two implementations: `ssh.Connection` (paramiko, a real device) and `local.LocalTransport` (a
directory on this machine acting as the device user's home, running the same shims as real
processes). Device code depends on this protocol only.

Contract shared by both: remote paths are relative to the device user's home (or absolute);
an absent path is an answer for reads (`read_text`, `readlink`, `listdir` return None); every
other failure is a typed `DeviceError` — `DeviceUnreachable` when the device stopped answering
(connection lost, a transfer stalled), `RemoteCommandFailed` when it answered with a failure
(a command's exit status, a file operation refused). No foreign exception crosses it.

Deadlines: every operation has one (`edgekit.config.timeouts.Timeouts`, given when the
transport is opened); `run` takes the command's own, or the transport's `command_s`. Output:
what a command prints is bounded (`BoundedOutput`): its first and last MiB are kept, and a
marker in the middle says how many bytes were cut, so a command printing gigabytes costs
edgekit a few MiB.

The device is not trusted: what is read back from it is bounded before it is used. `get` takes
the most bytes the caller expects (validation: what the manifest's shape and dtype imply) and
fetches only a regular file — a symlink (to /dev/zero, say), a FIFO or a device is refused on
the device's side of the link, before a byte is read — and the whole download has a byte
deadline (`transfer_deadline`) besides the idle one, so a device dripping bytes cannot hold
a deploy either. `read_text` refuses a file over its cap; `read_tail` reads a journal or a
log from its end, at most a cap's worth. Every refusal is a `DeviceAnswerRefused` (exit 15).
"""

from __future__ import annotations

import errno as errnos
import stat as stats
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self

from edgekit.errors import DeviceAnswerRefused, DeviceError, RemoteCommandFailed

# What a command's stdout and stderr each keep: its head and its tail. Every caller reads a
# few kB (probe facts, a benchmark's JSON, a hook's last lines); a MiB each way leaves room.
OUTPUT_HEAD_BYTES = 1 << 20
OUTPUT_TAIL_BYTES = 1 << 20

# What `read_text` takes (a manifest, a signers file: kilobytes) and what `read_tail` keeps of
# a journal (a deploy adds ~100 bytes to it: a MiB is thousands of deploys of history).
TEXT_MAX_BYTES = 1 << 20
TAIL_MAX_BYTES = 1 << 20
# The slowest transfer a download may be before its byte deadline: a device that sends a byte
# now and then stays within the idle deadline forever, this ends it.
MIN_TRANSFER_RATE = 64 * 1024      # bytes per second


class BoundedOutput:
    """A stream's first `head` and last `tail` bytes, and how many bytes between them were
    dropped. Memory stays under head + 2 * tail whatever the stream's length."""

    def __init__(self, head: int = OUTPUT_HEAD_BYTES, tail: int = OUTPUT_TAIL_BYTES):
        self._head_limit, self._tail_limit = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * self._tail_limit:
                del self._tail[:-self._tail_limit]

    @property
    def cut(self) -> int:
        return self.total - len(self._head) - min(len(self._tail), self._tail_limit)

    def getvalue(self) -> bytes:
        tail = bytes(self._tail[-self._tail_limit:]) if self._tail_limit else b""
        if not self.cut:
            return bytes(self._head) + tail
        marker = f"\n[edgekit: {self.cut} bytes of output cut here]\n".encode()
        return bytes(self._head) + marker + tail


@dataclass(frozen=True)
class RemoteResult:
    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_cut: int = 0     # bytes dropped from the middle of stdout (see BoundedOutput)
    stderr_cut: int = 0

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


@dataclass(frozen=True)
class RemoteEntry:
    """One directory entry on the device."""

    name: str
    mtime: float


class Transport(Protocol):
    """One open session with a device; a context manager (closing it ends the session)."""

    @property
    def where(self) -> str:
        """The device as errors and reports name it: user@host[:port], or local:/dir."""
        ...

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            stdin: bytes | None = None, check: bool = True,
            what: str = "remote command failed") -> RemoteResult:
        """Run argv (never a shell string) in the home directory. A non-zero exit raises
        RemoteCommandFailed(`what`) if `check`; running past `timeout` (default: the
        transport's `command_s`) raises it with 124. stdout and stderr are bounded."""
        ...

    def put(self, local: Path, remote: str) -> int:
        """Upload a file (complete when this returns); returns the bytes sent."""
        ...

    def get(self, remote: str, local: Path, *, max_bytes: int) -> int:
        """Download a regular file of at most `max_bytes`; returns the bytes written. A link,
        FIFO or device, a larger file, or one that outgrows `max_bytes` while it is read, is
        DeviceAnswerRefused; a download past `transfer_deadline` ends the connection."""
        ...

    def read_text(self, remote: str, *, max_bytes: int = TEXT_MAX_BYTES) -> str | None:
        """A small regular file's text (UTF-8, undecodable bytes replaced); None if it does
        not exist; DeviceAnswerRefused if it is not a regular file or over `max_bytes`."""
        ...

    def read_tail(self, remote: str, *, max_bytes: int = TAIL_MAX_BYTES) -> str | None:
        """The end of a regular file (a journal, a log): its last `max_bytes` at most, from
        the first whole line on when it was cut; None if it does not exist."""
        ...

    def append_text(self, remote: str, text: str) -> None:
        ...

    def replace_text(self, remote: str, text: str) -> None:
        """Write a small file whole: under a name of its own beside `remote`, then renamed
        over it (a reader sees the old text or the new one, never half of it)."""
        ...

    def readlink(self, remote: str) -> str | None:
        """A symlink's target; None if there is no such path."""
        ...

    def listdir(self, remote: str) -> list[RemoteEntry] | None:
        """The directory's entries (unordered); None if it does not exist."""
        ...

    def mkdirs(self, remote: str) -> None:
        """mkdir -p."""
        ...

    def rename(self, old: str, new: str) -> None:
        """rename(2): replaces `new` atomically (a file, or an empty directory)."""
        ...

    def chmod(self, remote: str, mode: int) -> None:
        ...

    def close(self) -> None:
        ...

    def __enter__(self) -> Self:
        ...

    def __exit__(self, *exc: object) -> None:
        ...


def transfer_deadline(idle_s: float, max_bytes: int) -> float:
    """Seconds a whole download of up to `max_bytes` may take: the idle deadline, plus the
    time the slowest acceptable link needs for the bytes."""
    return idle_s + max_bytes / MIN_TRANSFER_RATE


def refuse_unless_regular(where: str, remote: str, mode: int, size: int | None,
                          max_bytes: float) -> None:
    """A file the device offers, before it is read: a regular file of at most `max_bytes`."""
    if not stats.S_ISREG(mode):
        kind = ("a symlink" if stats.S_ISLNK(mode) else "a directory" if stats.S_ISDIR(mode)
                else "a FIFO" if stats.S_ISFIFO(mode) else "a device or socket")
        raise DeviceAnswerRefused(
            f"{remote} on the device is {kind}, not a regular file; not read", where=where,
            hint="the device is not behaving as edgekit's shims do: check it for tampering")
    if size is not None and size > max_bytes:
        raise too_large(where, remote, f"{size:,} bytes", max_bytes)


def too_large(where: str, remote: str, size: str, max_bytes: int) -> DeviceAnswerRefused:
    return DeviceAnswerRefused(
        f"{remote} on the device is {size}, more than the {max_bytes:,} expected; refused "
        "(nothing of it is kept)", where=where,
        hint="the device is not behaving as edgekit's shims do: check it for tampering")


def tail_text(data: bytes, cut: bool) -> str:
    """The text of a file's last bytes: from the first whole line on when the start was cut."""
    if cut:
        data = data.partition(b"\n")[2]
    return data.decode(errors="replace")


def short_command(argv: Sequence[str] | str, limit: int = 80) -> str:
    """A command as a step name in a one-line error."""
    text = argv if isinstance(argv, str) else " ".join(argv)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def file_op_failed(where: str, op: str, paths: Sequence[str], exc: OSError,
                   hint: str | None = None) -> RemoteCommandFailed:
    """A file operation the device refused (no such file, permission, disk full, …)."""
    code = exc.errno or 1
    reason = exc.strerror or str(exc) or errnos.errorcode.get(code, type(exc).__name__)
    return RemoteCommandFailed(f"{op} failed: {reason}", where=where, argv=[op, *paths],
                               returncode=code, stderr_tail=reason, hint=hint)


SPACE_HINT = ("free space or inodes on the device, then deploy again (the next deploy removes "
              "what this one left)")


def space_left(conn: Transport, remote: str) -> tuple[int, int] | None:
    """(bytes, inodes) free on the device's filesystem that holds `remote` (or its nearest
    existing ancestor); None if the device does not say. Used to explain a failed write: an
    SFTP server reports a full disk, or a filesystem out of inodes, as a bare "Failure"."""
    parts = remote.rstrip("/").split("/")
    candidates = ["/".join(parts[:i]) or ("/" if remote.startswith("/") else ".")
                  for i in range(len(parts), -1, -1)]
    try:  # coreutils and busybox: free blocks for users, block size, free inodes
        result = conn.run(["stat", "-f", "-c", "%a %S %d", "--", *candidates], check=False,
                          timeout=30)
    except DeviceError:
        return None
    for line in result.text.splitlines():
        fields = line.split()
        # ASCII digits only ('²'.isdigit() is True, and int() refuses it): the device's words
        if len(fields) == 3 and all(f.isascii() and f.isdigit() and len(f) < 24
                                    for f in fields):
            return int(fields[0]) * int(fields[1]), int(fields[2])
    return None


def out_of_space(free: tuple[int, int] | None, needed: int) -> str | None:
    """Why a write of `needed` bytes failed, if the filesystem is full; None otherwise."""
    if free is None:
        return None
    free_bytes, free_inodes = free
    if free_inodes == 0:
        return "no free inodes left on the device"
    if free_bytes < max(needed, 1):
        return f"no space left on the device ({free_bytes // 1024} KiB free)"
    return None
