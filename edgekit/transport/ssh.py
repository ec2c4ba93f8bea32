"""SSH to devices: the only module that imports paramiko.

Lifecycle: `connect(address, identity)` opens one authenticated connection and is a context
manager; `run()` executes an argv (quoted here, never a string built elsewhere), `put()`/`get()`
move files over SFTP (opened lazily, once). Closing the context closes both.

Security: host keys come only from edgekit's own known_hosts (pinned by `edgekit devices trust`
or `edgekit lab up`); an unknown key is refused before anything is sent and a changed key is
refused before authentication (paramiko checks the host key right after key exchange). The
identity is an explicit key file: no agent, no key search, no agent forwarding.
"""

from __future__ import annotations

import base64
import errno
import logging
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import paramiko
import tenacity

from edgekit.config.paths import known_hosts_path
from edgekit.config.timeouts import Timeouts
from edgekit.errors import (AuthFailed, ConfigError, DeviceError, DeviceUnreachable,
                            HostKeyChanged, HostKeyUnknown, RemoteCommandFailed, printable)
from edgekit.config.address import DeviceAddress
from edgekit.transport.known_hosts import pin_line, pinned
from edgekit.transport.base import (MIN_TRANSFER_RATE, SPACE_HINT, TAIL_MAX_BYTES,
                                    TEXT_MAX_BYTES, BoundedOutput, RemoteEntry, RemoteResult,
                                    file_op_failed, out_of_space, refuse_unless_regular,
                                    short_command, space_left, tail_text, too_large,
                                    transfer_deadline)

# A refused or dropped connection is retried (sshd restarting, or over its MaxStartups: it
# drops connections before its banner); a deadline that passed is not (the device is silent,
# and it would only multiply the wait). Backoff "full jitter" (tenacity): uniform in
# [0.25 s, 1, 2, 4, 4 s] so that a fleet turned away together does not come back together.
CONNECT_ATTEMPTS = 5
_BACKOFF = tenacity.wait_random_exponential(multiplier=1.0, min=0.25, max=4.0)
# After the exit status, how long output may stay quiet, and go on at most, before the pipe
# is taken as held open by a process the command left running (OpenSSH then sends no EOF).
OUTPUT_AFTER_EXIT_GRACE_S = 2.0
OUTPUT_AFTER_EXIT_LIMIT_S = 10.0

# paramiko's transport thread logs each failed handshake with a traceback at ERROR, and with no
# logging configured Python prints those to stderr (logging.lastResort): three raw tracebacks
# for one port that does not speak SSH. Every failure it logs is also raised to us and
# translated here, so its log goes nowhere unless an application configures the logger.
_paramiko_log = logging.getLogger("paramiko")
_paramiko_log.addHandler(logging.NullHandler())
_paramiko_log.propagate = False

T = TypeVar("T")
_CLOSED_ERRORS = (paramiko.SSHException, OSError, EOFError)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a host key (paramiko's, as `ssh-keygen -l` shows it)."""
    return key.fingerprint


@dataclass(frozen=True)
class Stall:
    """A step, its deadline, and the setting the deadline comes from (for the message)."""

    step: str
    seconds: float
    setting: str


class _Watchdog:
    """Closes the connection when a step runs past its deadline, so that whatever paramiko call
    is blocked on it raises: paramiko's own timeouts do not cover every wait (a request's reply
    in exec_command, a send into a full TCP window). One thread per connection, started on the
    first step."""

    def __init__(self, on_expiry: Callable[[], None]):
        self._on_expiry = on_expiry
        self._lock = threading.Lock()
        self._step: tuple[Stall, float] | None = None      # the step and its deadline
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.expired: Stall | None = None                  # the step that ran past it

    @contextmanager
    def step(self, stall: Stall) -> Iterator[Callable[..., None]]:
        """Guard one step; the context's value is `kick()`: progress, restart the deadline."""
        def kick(*_: object) -> None:
            with self._lock:
                if self._step is not None:
                    self._step = (stall, time.monotonic() + stall.seconds)
        with self._lock:
            self._step = (stall, time.monotonic() + stall.seconds)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="edgekit-ssh-watchdog")
                self._thread.start()
        try:
            yield kick
        finally:
            with self._lock:
                self._step = None

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                step = self._step
                if step is None or time.monotonic() < step[1]:
                    continue
                self.expired, self._step = step[0], None
            self._on_expiry()
            return

    def stop(self) -> None:
        self._stop.set()


class Connection:
    """One authenticated SSH connection to a device, a `Transport` (see module doc for its
    lifecycle). Every paramiko, socket and SFTP error becomes a DeviceError here.

    Every operation runs under a deadline (`timeouts`): an SFTP operation that gets no answer
    for `sftp_s` (an upload or download: no block acknowledged for that long), a command past
    its own timeout plus `sftp_s`. A step past its deadline, or a connection lost, ends the
    connection: the error names the step, and every later operation raises it again at once
    (clean-up after a failure does not wait out the deadline once more)."""

    def __init__(self, address: DeviceAddress, client: paramiko.SSHClient,
                 timeouts: Timeouts | None = None):
        self.address = address
        self.timeouts = timeouts or Timeouts()
        self._client = client
        self._sftp: paramiko.SFTPClient | None = None
        self._broken: str | None = None
        self._watchdog = _Watchdog(self._client.close)

    @property
    def where(self) -> str:
        return str(self.address)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._broken is None:
            try:
                with self._watchdog.step(self._sftp_stall("closing the connection")):
                    self._drop_sftp()
            finally:
                self._client.close()
        self._watchdog.stop()
        self._client.close()

    def run(self, argv: Sequence[str], *, timeout: float | None = None,
            stdin: bytes | None = None, check: bool = True,
            what: str = "remote command failed") -> RemoteResult:
        """Run argv on the device (each argument shell-quoted); the cwd is the user's home."""
        timeout = self.timeouts.command_s if timeout is None else timeout
        command = shlex.join(argv)
        step = f"command {short_command(command)!r}"
        self._check_usable()
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise self._lost(step, "the connection is closed")
        try:
            with self._watchdog.step(Stall(step, timeout + self.timeouts.sftp_s,
                                           "the command's timeout + timeouts.sftp_s")):
                channel = transport.open_session(timeout=self.timeouts.auth_s)
                channel.settimeout(self.timeouts.sftp_s)  # bounds sendall() of stdin
                channel.exec_command(command)
                if stdin is not None:
                    channel.sendall(stdin)
                channel.shutdown_write()
                out, err = self._drain(channel, timeout, command)
                code = channel.recv_exit_status()
        except TimeoutError:  # stdin not taken for sftp_s
            raise self._stalled(Stall(step, self.timeouts.sftp_s, "timeouts.sftp_s")) from None
        except _CLOSED_ERRORS as exc:
            if "Timeout opening channel" in str(exc):
                raise self._stalled(Stall(step, self.timeouts.auth_s,
                                          "timeouts.auth_s")) from None
            raise self._lost(step, _reason(exc)) from None
        if code == -1 and not self._alive():  # the channel closed without an exit status
            raise self._lost(step, "the channel closed without an exit status")
        result = RemoteResult(code, out.getvalue(), err.getvalue(),
                              stdout_cut=out.cut, stderr_cut=err.cut)
        if check and code != 0:
            raise RemoteCommandFailed(what, where=self.where, argv=list(argv),
                                      returncode=code,
                                      stderr_tail=(result.stderr or result.stdout)
                                      [-3000:].decode(errors="replace"))
        return result

    def _drain(self, channel: paramiko.Channel, timeout: float,
               command: str) -> tuple[BoundedOutput, BoundedOutput]:
        out, err = BoundedOutput(), BoundedOutput()
        deadline = time.monotonic() + timeout
        quiet_since, exited_at = time.monotonic(), None
        while True:
            while channel.recv_ready():
                out.write(channel.recv(65536))
                quiet_since = time.monotonic()
            while channel.recv_stderr_ready():
                err.write(channel.recv_stderr(65536))
                quiet_since = time.monotonic()
            # sshd may send the exit status before the last of the output (it was still in
            # the pipe): done at EOF, or after the exit once output is quiet for a grace
            # period or has gone on for a limit (a background process the command started
            # can hold the pipe open, and write to it, for ever).
            if channel.exit_status_ready():
                now = time.monotonic()
                exited_at = now if exited_at is None else exited_at
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                if (drained and (channel.eof_received
                                 or now - quiet_since > OUTPUT_AFTER_EXIT_GRACE_S)) \
                        or now - exited_at > OUTPUT_AFTER_EXIT_LIMIT_S:
                    return out, err
            if not self._alive():
                raise EOFError("the channel closed")
            if time.monotonic() > deadline:
                channel.close()
                raise RemoteCommandFailed(f"timed out after {timeout:.0f} s",
                                          where=self.where, argv=[command], returncode=124,
                                          stderr_tail=err.getvalue()[-3000:].decode(
                                              errors="replace"))
            select.select([channel], [], [], 0.1)

    # --- files, over SFTP (opened lazily, once) ---------------------------------------------

    def put(self, local: Path, remote: str) -> int:
        """Upload a file; returns bytes sent (SFTP confirms the size)."""
        def upload(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> None:
            sftp.put(str(local), remote, callback=kick, confirm=True)
        size = local.stat().st_size
        self._sftp_do(f"upload of {remote}", "upload", [str(local), remote], upload,
                      writes=size)
        return size

    def get(self, remote: str, local: Path, *, max_bytes: int) -> int:
        """Download a regular file of at most `max_bytes` (transport.base): the device's
        lstat, then fstat of the opened handle, decide before a byte is read; the download
        stops at the cap and at its byte deadline (`transfer_deadline`)."""
        budget = transfer_deadline(self.timeouts.sftp_s, max_bytes)
        step = f"download of {remote}"

        def download(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> int:
            deadline = time.monotonic() + budget
            got = 0
            with self._open_regular(sftp, remote, max_bytes) as (f, size), \
                    open(local, "wb") as out:
                f.prefetch(min(size, max_bytes))
                # one SFTP block at a time: each block is progress (the idle deadline)
                while chunk := f.read(min(32768, max_bytes + 1 - got)):
                    got += len(chunk)
                    if got > max_bytes:
                        raise too_large(self.where, remote, f"over {max_bytes:,} bytes "
                                        "(it grew while it was read)", max_bytes)
                    out.write(chunk)
                    kick()
                    if time.monotonic() > deadline:
                        raise self._break(f"{step}: {got:,} bytes in {budget:g} s, slower "
                                          f"than its deadline allows ({max_bytes:,} bytes at "
                                          f"{MIN_TRANSFER_RATE // 1024} KiB/s + "
                                          "timeouts.sftp_s); connection closed")
            return got
        try:
            return self._sftp_do(step, "download", [remote, str(local)], download)
        except BaseException:
            local.unlink(missing_ok=True)
            raise

    def read_text(self, remote: str, *, max_bytes: int = TEXT_MAX_BYTES) -> str | None:
        def read(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> str:
            with self._open_regular(sftp, remote, max_bytes) as (f, _):
                data = f.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise too_large(self.where, remote, f"over {max_bytes:,} bytes", max_bytes)
            return data.decode(errors="replace")
        return self._sftp_do(f"read of {remote}", "read", [remote], read, none_if_absent=True)

    def read_tail(self, remote: str, *, max_bytes: int = TAIL_MAX_BYTES) -> str | None:
        def read(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> str:
            with self._open_regular(sftp, remote, None) as (f, size):
                f.seek(max(0, size - max_bytes))
                return tail_text(f.read(max_bytes), size > max_bytes)
        return self._sftp_do(f"read of {remote}", "read", [remote], read, none_if_absent=True)

    @contextmanager
    def _open_regular(self, sftp: paramiko.SFTPClient, remote: str, max_bytes: int | None
                      ) -> Iterator[tuple[paramiko.SFTPFile, int]]:
        """(handle, size) of `remote` if it is a regular file (of at most `max_bytes`): lstat
        refuses a link, FIFO or device before it is opened; fstat of the handle refuses one
        swapped in since."""
        limit = max_bytes if max_bytes is not None else float("inf")
        attrs = sftp.lstat(remote)
        refuse_unless_regular(self.where, remote, attrs.st_mode or 0, attrs.st_size, limit)
        with sftp.open(remote, "rb") as f:
            attrs = f.stat()
            refuse_unless_regular(self.where, remote, attrs.st_mode or 0, attrs.st_size, limit)
            yield f, attrs.st_size or 0

    def append_text(self, remote: str, text: str) -> None:
        def append(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> None:
            with sftp.open(remote, "a") as f:
                f.write(text.encode())
        self._sftp_do(f"append to {remote}", "append", [remote], append, writes=len(text))

    def replace_text(self, remote: str, text: str) -> None:
        staging = f"{remote}.{secrets.token_hex(4)}"

        def write(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> None:
            with sftp.open(staging, "w") as f:
                f.write(text.encode())
        self._sftp_do(f"write of {remote}", "write", [staging], write, writes=len(text))
        self.rename(staging, remote)

    def readlink(self, remote: str) -> str | None:
        return self._sftp_do(f"readlink of {remote}", "readlink", [remote],
                             lambda sftp, kick: sftp.readlink(remote), none_if_absent=True)

    def listdir(self, remote: str) -> list[RemoteEntry] | None:
        def entries(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> list[RemoteEntry]:
            return [RemoteEntry(e.filename, float(e.st_mtime or 0))
                    for e in sftp.listdir_attr(remote)]
        return self._sftp_do(f"listing of {remote}", "listdir", [remote], entries,
                             none_if_absent=True)

    def mkdirs(self, remote: str) -> None:
        """mkdir -p over SFTP (relative paths are relative to the home directory)."""
        def make(sftp: paramiko.SFTPClient, kick: Callable[..., None]) -> None:
            current = ""
            for part in remote.strip("/").split("/"):
                current = f"{current}/{part}" if current else \
                    ("/" if remote.startswith("/") else "") + part
                try:
                    sftp.stat(current)
                except FileNotFoundError:
                    try:
                        sftp.mkdir(current)
                    except OSError:   # fine if another deploy made it meanwhile
                        if not _exists(sftp, current):
                            raise
                kick()
        self._sftp_do(f"mkdir of {remote}", "mkdir", [remote], make, writes=1)

    def rename(self, old: str, new: str) -> None:
        self._sftp_do(f"rename of {old}", "rename", [old, new],
                      lambda sftp, kick: sftp.posix_rename(old, new))

    def chmod(self, remote: str, mode: int) -> None:
        self._sftp_do(f"chmod of {remote}", "chmod", [oct(mode), remote],
                      lambda sftp, kick: sftp.chmod(remote, mode))

    def _sftp_do(self, step: str, op: str, paths: list[str],
                 action: Callable[[paramiko.SFTPClient, Callable[..., None]], T],
                 *, none_if_absent: bool = False, writes: int | None = None) -> T | None:
        """Run one SFTP action under the `sftp_s` deadline (`kick` restarts it on progress),
        translating what it raises (see transport.base). `writes`: the bytes the action
        writes (None: it writes nothing), to tell a full filesystem from other failures."""
        self._check_usable()
        try:
            with self._watchdog.step(self._sftp_stall(step)) as kick:
                sftp = self._open_sftp()
                return action(sftp, kick)
        except FileNotFoundError as exc:
            if none_if_absent:
                return None
            raise file_op_failed(self.where, op, paths, exc) from None
        except TimeoutError:
            raise self._stalled(self._sftp_stall(step)) from None
        except (paramiko.SSHException, EOFError) as exc:
            raise self._lost(step, _reason(exc)) from None
        except OSError as exc:
            if self._watchdog.expired or not self._alive():
                raise self._lost(step, _reason(exc)) from None
            # sftp-server says "Failure" for ENOSPC, paramiko "size mismatch in put!" for a
            # short write: ask the device whether its filesystem is full
            full = None if writes is None else \
                out_of_space(space_left(self, paths[-1]), writes)
            if full:
                raise file_op_failed(self.where, op, paths,
                                     OSError(errno.ENOSPC, f"{full} ({paths[-1]})"),
                                     hint=SPACE_HINT) from None
            raise file_op_failed(self.where, op, paths, exc) from None

    def _open_sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except _CLOSED_ERRORS as exc:
                if self._alive() and not self._watchdog.expired:
                    raise RemoteCommandFailed(f"cannot start SFTP: {exc}", where=self.where,
                                              argv=["sftp"], returncode=1, stderr_tail=str(exc),
                                              hint="the device needs an SFTP server "
                                                   "(openssh-sftp-server)") from None
                raise
            self._sftp.get_channel().settimeout(self.timeouts.sftp_s)
        return self._sftp

    def _drop_sftp(self) -> None:
        sftp, self._sftp = self._sftp, None
        if sftp is not None:
            try:
                sftp.close()
            except _CLOSED_ERRORS:
                pass  # closing a session that already broke: nothing left to release

    # --- failures: a stalled or lost connection ends it -------------------------------------

    def _sftp_stall(self, step: str) -> Stall:
        return Stall(step, self.timeouts.sftp_s, "timeouts.sftp_s")

    def _stalled(self, stall: Stall) -> DeviceUnreachable:
        return self._break(f"{stall.step}: the device stopped answering for "
                           f"{stall.seconds:g} s ({stall.setting}); connection closed")

    def _lost(self, step: str, reason: str) -> DeviceUnreachable:
        expired = self._watchdog.expired
        if expired is not None:  # the watchdog closed it: the cause is the stall
            return self._stalled(expired)
        return self._break(f"{step}: connection lost ({reason})")

    def _break(self, message: str) -> DeviceUnreachable:
        if self._broken is None:
            self._broken = message
            self._sftp = None
            self._client.close()
        return DeviceUnreachable(self._broken, where=self.where)

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise DeviceUnreachable(self._broken, where=self.where)

    def _alive(self) -> bool:
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()


def _exists(sftp: paramiko.SFTPClient, remote: str) -> bool:
    try:
        sftp.stat(remote)
        return True
    except FileNotFoundError:
        return False


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- connecting ------------------------------------------------------------------------------

def offline_hint(address: DeviceAddress) -> str:
    """What to check when nothing answers at `address` (the device is off, elsewhere, or its
    sshd is not running)."""
    return (f"check the address and port ({address.host}:{address.port}), that the device is "
            "on and reachable from this machine (network, VPN, firewall) and runs sshd; "
            f"`edgekit probe {address}` tries it alone")


class _Retry(Exception):
    """A connection attempt refused or dropped before we were in: worth another attempt."""

    def __init__(self, step: str, reason: str):
        super().__init__(f"{step}: {reason}")


def connect(address: DeviceAddress, identity: Path, *,
            known_hosts: Path | None = None, attempts: int = CONNECT_ATTEMPTS,
            timeouts: Timeouts | None = None) -> Connection:
    """An authenticated connection, or a precise one-line error naming the step that failed
    (connect, banner, key exchange, authentication): unreachable, silent past a deadline,
    unknown or changed host key, or authentication refused. Only a refused or dropped
    connection is retried (bounded, with jittered backoff)."""
    timeouts = timeouts or Timeouts().with_env()
    known_hosts = known_hosts or known_hosts_path()
    identity_key = _load_identity(identity, address)
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts), wait=_BACKOFF,
        retry=tenacity.retry_if_exception_type(_Retry), reraise=True)
    try:
        client = retrying(_handshake, address, identity, identity_key, known_hosts, timeouts)
    except _Retry as last:
        raise DeviceUnreachable(f"{last} (after {attempts} attempts)", where=str(address),
                                hint=offline_hint(address)) from None
    return Connection(address, client, timeouts)


def _handshake(address: DeviceAddress, identity: Path, identity_key: paramiko.PKey,
               known_hosts: Path, timeouts: Timeouts) -> paramiko.SSHClient:
    """One attempt: TCP connect, banner, key exchange with the pinned host key, auth."""
    where = str(address)
    try:
        sock = socket.create_connection((address.host, address.port),
                                        timeout=timeouts.connect_s)
    except TimeoutError:
        raise DeviceUnreachable(f"connect: no answer within {timeouts.connect_s:g} s "
                                "(timeouts.connect_s)", where=where,
                                hint=offline_hint(address)) from None
    except socket.gaierror as exc:      # no such host name: another attempt will not find it
        raise DeviceUnreachable(f"connect: cannot resolve {address.host} ({_reason(exc)})",
                                where=where, hint=offline_hint(address)) from None
    except OSError as exc:
        raise _Retry("connect", _reason(exc)) from None
    _refuse_a_non_ssh_greeting(sock, where, timeouts)
    client = paramiko.SSHClient()
    _pin_for(client, address, known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        # with `sock` given, `timeout` bounds banner + key exchange (paramiko's start_client)
        client.connect(address.host, port=address.port, username=address.user,
                       pkey=identity_key, allow_agent=False, look_for_keys=False, sock=sock,
                       timeout=timeouts.banner_s + timeouts.auth_s,
                       banner_timeout=timeouts.banner_s, auth_timeout=timeouts.auth_s,
                       channel_timeout=timeouts.auth_s)
        return client
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyChanged(
            "the device's host key has CHANGED since it was pinned; refused before "
            f"authentication (got {fingerprint(exc.key)}, pinned "
            f"{fingerprint(exc.expected_key)})", where=where,
            got=fingerprint(exc.key), expected=fingerprint(exc.expected_key),
            hint="if the device was re-imaged on purpose, run `edgekit devices trust "
                 f"{address} --replace`; otherwise treat this as an attack") from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        transport = client.get_transport()
        step = _handshake_step(transport)
        alive = transport is not None and transport.is_active()
        client.close()
        if "not found in known_hosts" in str(exc):
            raise HostKeyUnknown(
                "the device's host key is not pinned; nothing was sent to it", where=where,
                hint=f"check and pin it first: edgekit devices trust {address}") from None
        if step == "banner" and isinstance(exc.__context__, TimeoutError):
            raise DeviceUnreachable(
                f"banner: no SSH banner within {timeouts.banner_s:g} s (timeouts.banner_s): "
                "the port accepts connections but does not speak SSH", where=where) from None
        if step == "banner" and "protocol version" in str(exc):
            raise DeviceUnreachable(f"banner: the port does not speak SSH ({_reason(exc)})",
                                    where=where) from None
        if step == "key exchange" and alive:  # start_client gave up waiting
            raise DeviceUnreachable(
                f"key exchange: no answer within {timeouts.auth_s:g} s (timeouts.auth_s)",
                where=where) from None
        if step == "authentication" and "timeout" in str(exc).lower():
            raise DeviceUnreachable(
                f"authentication: no answer within {timeouts.auth_s:g} s (timeouts.auth_s)",
                where=where) from None
        if step == "authentication" and alive \
                and isinstance(exc, paramiko.AuthenticationException):
            raise AuthFailed(f"the device refused the key {identity}", where=where,
                             hint="install the public key in the device's authorized_keys, "
                                  "or pass --identity") from None
        raise _Retry(step, f"connection closed by the device ({_reason(exc)})") from None


def _pin_for(client: paramiko.SSHClient, address: DeviceAddress, known_hosts: Path) -> None:
    """Give `client` only this device's pinned keys, looked up in the process-wide index
    (known_hosts.py): paramiko then refuses an unknown key (RejectPolicy) and a changed one
    (BadHostKeyException) exactly as with the whole file loaded, at the cost of one lookup."""
    name = address.known_hosts_name
    keys = client.get_host_keys()
    for key_type, blob in pinned(known_hosts).lookup(name):
        try:
            keys.add(name, key_type, paramiko.PKey.from_type_string(key_type,
                                                                     base64.b64decode(blob)))
        except (paramiko.SSHException, ValueError):   # a damaged line pins nothing
            continue


def _refuse_a_non_ssh_greeting(sock: socket.socket, where: str, timeouts: Timeouts) -> None:
    """A port whose first words are not an SSH version line ("HTTP/1.1 400 …") does not speak
    SSH: one line, not retried (docs/how-to/devices.md, Deadlines). The greeting is only
    peeked at, paramiko reads it again; a port that closes before saying anything (sshd over
    MaxStartups) and one that says nothing (the banner deadline) are left to the handshake as
    before."""
    sock.settimeout(timeouts.banner_s)
    try:
        first = sock.recv(64, socket.MSG_PEEK)
    except TimeoutError:
        sock.close()
        raise DeviceUnreachable(
            f"banner: no SSH banner within {timeouts.banner_s:g} s (timeouts.banner_s): "
            "the port accepts connections but does not speak SSH", where=where) from None
    except OSError:
        return     # reset before a word: the handshake's own error (retried) says so
    # sshd over its MaxStartups says so before it closes: that is a refusal, retried
    if first and not (first.startswith((b"SSH-", b"Exceeded MaxStartups"))
                      or b"SSH-".startswith(first)
                      or b"Exceeded MaxStartups".startswith(first)):
        sock.close()
        said = printable(first.split(b"\n", 1)[0].decode(errors="replace").strip())[:60]
        raise DeviceUnreachable(f"banner: the port does not speak SSH (it said {said!r})",
                                where=where)


def _handshake_step(transport: paramiko.Transport | None) -> str:
    """How far a failed handshake got: the step it failed in."""
    if transport is None or not transport.remote_version:
        return "banner"
    if transport.host_key is None:
        return "key exchange"
    return "authentication"


def _load_identity(identity: Path, address: DeviceAddress) -> paramiko.PKey:
    try:
        return paramiko.PKey.from_path(str(identity))
    except FileNotFoundError:   # nothing was tried: a configuration gap, not a refusal
        raise ConfigError(f"identity file not found: {identity}; nothing was sent to the "
                          "device", where=str(address), key="identity",
                          hint="pass --identity PATH to a private key") from None
    except (paramiko.SSHException, ValueError) as exc:
        raise AuthFailed(f"cannot read identity {identity}: {exc}", where=str(address)) \
            from None


def fetch_host_key(address: DeviceAddress, timeouts: Timeouts | None = None
                   ) -> tuple[str, str, str]:
    """The key the device presents (type, base64, fingerprint), without authenticating."""
    timeouts = timeouts or Timeouts().with_env()
    try:
        sock = socket.create_connection((address.host, address.port),
                                        timeout=timeouts.connect_s)
    except OSError as exc:
        raise DeviceUnreachable(f"connect: {_reason(exc)}", where=str(address),
                                hint=offline_hint(address)) from None
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeouts.banner_s
    try:
        transport.start_client(timeout=timeouts.banner_s + timeouts.auth_s)
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64(), fingerprint(key)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise DeviceUnreachable(f"{_handshake_step(transport)}: no SSH server answered "
                                f"({_reason(exc)})", where=str(address)) from None
    finally:
        transport.close()


def pin_host_key(address: DeviceAddress, key_type: str, key_base64: str, *,
                 replace: bool = False, known_hosts: Path | None = None) -> None:
    """Record a host key as the one to expect for this address."""
    known_hosts = known_hosts or known_hosts_path()
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    try:
        key = paramiko.PKey.from_type_string(key_type, base64.b64decode(key_base64))
    except (paramiko.SSHException, ValueError) as exc:
        raise DeviceError(f"cannot pin the host key: {exc}", where=str(address)) from None
    pin_line(known_hosts, address.known_hosts_name, key.get_name(), key.get_base64(),
             replace=replace)


def pinned_fingerprint(address: DeviceAddress, known_hosts: Path | None = None) -> str | None:
    known_hosts = known_hosts or known_hosts_path()
    for key_type, blob in pinned(known_hosts).lookup(address.known_hosts_name):
        try:
            return fingerprint(paramiko.PKey.from_type_string(key_type, base64.b64decode(blob)))
        except (paramiko.SSHException, ValueError):
            continue
    return None
