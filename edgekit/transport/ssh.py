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
import hashlib
import select
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import paramiko

from edgekit.config.paths import known_hosts_path
from edgekit.errors import (AuthFailed, DeviceError, DeviceUnreachable, HostKeyChanged,
                            HostKeyUnknown, RemoteCommandFailed)
from edgekit.config.address import DeviceAddress
from edgekit.transport.base import (DEFAULT_TIMEOUT_S, RemoteEntry, RemoteResult,
                                    file_op_failed)

CONNECT_TIMEOUT_S = 15.0    # TCP connect, SSH banner and auth each (emulated devices are slow)
CONNECT_ATTEMPTS = 3        # only for "unreachable"; key and auth failures are not retried
# An SFTP request unanswered this long means the device stopped answering (a transfer sends and
# acknowledges 32 kB blocks: even an emulated device answers one in well under a second).
SFTP_STALL_S = 120.0

T = TypeVar("T")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a host key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class Connection:
    """One authenticated SSH connection to a device, a `Transport` (see module doc for its
    lifecycle). Every paramiko, socket and SFTP error becomes a DeviceError here."""

    def __init__(self, address: DeviceAddress, client: paramiko.SSHClient):
        self.address = address
        self._client = client
        self._sftp: paramiko.SFTPClient | None = None

    @property
    def where(self) -> str:
        return str(self.address)

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._drop_sftp()
        self._client.close()

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S,
            stdin: bytes | None = None, check: bool = True,
            what: str = "remote command failed") -> RemoteResult:
        """Run argv on the device (each argument shell-quoted); the cwd is the user's home."""
        command = shlex.join(argv)
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise DeviceUnreachable("the connection to the device is closed", where=self.where)
        try:
            channel = transport.open_session(timeout=CONNECT_TIMEOUT_S)
            channel.settimeout(timeout)  # bounds sendall() of stdin to a device not reading it
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = self._drain(channel, timeout, command)
            code = channel.recv_exit_status()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            reason = str(exc) or type(exc).__name__
            raise DeviceUnreachable(f"connection lost while running a command: {reason}",
                                    where=self.where) from None
        if code == -1 and not self._alive():  # the channel closed without an exit status
            raise DeviceUnreachable("connection lost while running a command",
                                    where=self.where)
        result = RemoteResult(code, out, err)
        if check and code != 0:
            raise RemoteCommandFailed(what, where=self.where, argv=list(argv),
                                      returncode=code,
                                      stderr_tail=(err or out).decode(errors="replace")[-3000:])
        return result

    def _drain(self, channel: paramiko.Channel, timeout: float,
               command: str) -> tuple[bytes, bytes]:
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        while True:
            while channel.recv_ready():
                out += channel.recv(65536)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(65536)
            if channel.exit_status_ready() and not channel.recv_ready() \
                    and not channel.recv_stderr_ready():
                return bytes(out), bytes(err)
            if time.monotonic() > deadline:
                channel.close()
                raise RemoteCommandFailed(f"timed out after {timeout:.0f} s",
                                          where=self.where, argv=[command],
                                          returncode=124, stderr_tail=err.decode(errors="replace"))
            select.select([channel], [], [], 0.1)

    # --- files, over SFTP (opened lazily, once) ---------------------------------------------

    def put(self, local: Path, remote: str) -> int:
        """Upload a file; returns bytes sent (SFTP confirms the size)."""
        self._sftp_do("upload", [str(local), remote],
                      lambda sftp: sftp.put(str(local), remote, confirm=True))
        return local.stat().st_size

    def get(self, remote: str, local: Path) -> None:
        self._sftp_do("download", [remote, str(local)], lambda sftp: sftp.get(remote, str(local)))

    def read_text(self, remote: str) -> str | None:
        def read(sftp: paramiko.SFTPClient) -> str:
            with sftp.open(remote) as f:
                return f.read().decode(errors="replace")
        return self._sftp_do("read", [remote], read, none_if_absent=True)

    def append_text(self, remote: str, text: str) -> None:
        def append(sftp: paramiko.SFTPClient) -> None:
            with sftp.open(remote, "a") as f:
                f.write(text.encode())
        self._sftp_do("append", [remote], append)

    def readlink(self, remote: str) -> str | None:
        return self._sftp_do("readlink", [remote], lambda sftp: sftp.readlink(remote),
                             none_if_absent=True)

    def listdir(self, remote: str) -> list[RemoteEntry] | None:
        def entries(sftp: paramiko.SFTPClient) -> list[RemoteEntry]:
            return [RemoteEntry(e.filename, float(e.st_mtime or 0))
                    for e in sftp.listdir_attr(remote)]
        return self._sftp_do("listdir", [remote], entries, none_if_absent=True)

    def mkdirs(self, remote: str) -> None:
        """mkdir -p over SFTP (relative paths are relative to the home directory)."""
        def make(sftp: paramiko.SFTPClient) -> None:
            current = ""
            for part in remote.strip("/").split("/"):
                current = f"{current}/{part}" if current else \
                    ("/" if remote.startswith("/") else "") + part
                try:
                    sftp.stat(current)
                except FileNotFoundError:
                    sftp.mkdir(current)
        self._sftp_do("mkdir", [remote], make)

    def rename(self, old: str, new: str) -> None:
        self._sftp_do("rename", [old, new], lambda sftp: sftp.posix_rename(old, new))

    def chmod(self, remote: str, mode: int) -> None:
        self._sftp_do("chmod", [oct(mode), remote], lambda sftp: sftp.chmod(remote, mode))

    def _sftp_do(self, op: str, paths: list[str], action: Callable[[paramiko.SFTPClient], T],
                 *, none_if_absent: bool = False) -> T | None:
        """Run one SFTP action, translating what it raises (see transport.base)."""
        sftp = self._open_sftp()
        try:
            return action(sftp)
        except FileNotFoundError as exc:
            if none_if_absent:
                return None
            raise file_op_failed(self.where, op, paths, exc) from None
        except TimeoutError:
            self._drop_sftp()  # a reply may still arrive: the session is out of step
            raise DeviceUnreachable(f"{op} stalled: the device did not answer for "
                                    f"{SFTP_STALL_S:.0f} s", where=self.where) from None
        except (paramiko.SSHException, EOFError) as exc:
            self._drop_sftp()
            reason = str(exc) or type(exc).__name__
            raise DeviceUnreachable(f"connection lost during {op}: {reason}",
                                    where=self.where) from None
        except OSError as exc:
            if not self._alive():
                self._drop_sftp()
                raise DeviceUnreachable(f"connection lost during {op}: {exc}",
                                        where=self.where) from None
            raise file_op_failed(self.where, op, paths, exc) from None

    def _open_sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except (paramiko.SSHException, OSError, EOFError) as exc:
                if self._alive():
                    raise RemoteCommandFailed(f"cannot start SFTP: {exc}", where=self.where,
                                              argv=["sftp"], returncode=1, stderr_tail=str(exc),
                                              hint="the device needs an SFTP server "
                                                   "(openssh-sftp-server)") from None
                raise DeviceUnreachable(f"connection lost opening SFTP: {exc}",
                                        where=self.where) from None
            self._sftp.get_channel().settimeout(SFTP_STALL_S)
        return self._sftp

    def _drop_sftp(self) -> None:
        sftp, self._sftp = self._sftp, None
        if sftp is not None:
            try:
                sftp.close()
            except (paramiko.SSHException, OSError, EOFError):
                pass  # closing a session that already broke: nothing left to release

    def _alive(self) -> bool:
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()


def connect(address: DeviceAddress, identity: Path, *,
            known_hosts: Path | None = None, attempts: int = CONNECT_ATTEMPTS) -> Connection:
    """An authenticated connection, or a precise error: unreachable, unknown or changed host
    key, or authentication refused. Only "unreachable" is retried (bounded, with backoff)."""
    known_hosts = known_hosts or known_hosts_path()
    identity_key = _load_identity(identity, address)
    last: Exception | None = None
    for attempt in range(attempts):
        client = paramiko.SSHClient()
        if known_hosts.is_file():
            client.load_host_keys(str(known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(address.host, port=address.port, username=address.user,
                           pkey=identity_key, allow_agent=False, look_for_keys=False,
                           timeout=CONNECT_TIMEOUT_S, banner_timeout=CONNECT_TIMEOUT_S,
                           auth_timeout=CONNECT_TIMEOUT_S, channel_timeout=CONNECT_TIMEOUT_S)
            return Connection(address, client)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyChanged(
                "the device's host key has CHANGED since it was pinned; refused before "
                f"authentication (got {fingerprint(exc.key)}, pinned "
                f"{fingerprint(exc.expected_key)})", where=str(address),
                got=fingerprint(exc.key), expected=fingerprint(exc.expected_key),
                hint="if the device was re-imaged on purpose, run `edgekit devices trust "
                     f"{address} --replace`; otherwise treat this as an attack") from None
        except paramiko.AuthenticationException:
            client.close()
            raise AuthFailed(f"the device refused the key {identity}", where=str(address),
                             hint="install the public key in the device's authorized_keys, "
                                  "or pass --identity") from None
        except paramiko.SSHException as exc:
            client.close()
            if "not found in known_hosts" in str(exc):
                raise HostKeyUnknown(
                    "the device's host key is not pinned; nothing was sent to it",
                    where=str(address),
                    hint=f"check and pin it first: edgekit devices trust {address}") from None
            last = exc
        except (OSError, socket.timeout, EOFError) as exc:
            client.close()
            last = exc
        if attempt + 1 < attempts:
            time.sleep(min(2.0 ** attempt, 5.0))
    raise DeviceUnreachable(f"cannot connect after {attempts} attempts: {last}",
                            where=str(address),
                            hint="check the address and port, and that sshd runs on the device")


def _load_identity(identity: Path, address: DeviceAddress) -> paramiko.PKey:
    try:
        return paramiko.PKey.from_path(str(identity))
    except FileNotFoundError:
        raise AuthFailed(f"identity file not found: {identity}", where=str(address),
                         hint="pass --identity PATH to a private key") from None
    except (paramiko.SSHException, ValueError) as exc:
        raise AuthFailed(f"cannot read identity {identity}: {exc}", where=str(address)) \
            from None


def fetch_host_key(address: DeviceAddress, timeout: float = CONNECT_TIMEOUT_S
                   ) -> tuple[str, str, str]:
    """The key the device presents (type, base64, fingerprint), without authenticating."""
    try:
        sock = socket.create_connection((address.host, address.port), timeout=timeout)
    except OSError as exc:
        raise DeviceUnreachable(f"cannot connect: {exc}", where=str(address)) from None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64(), fingerprint(key)
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise DeviceUnreachable(f"no SSH server answered: {exc}", where=str(address)) from None
    finally:
        transport.close()


def pin_host_key(address: DeviceAddress, key_type: str, key_base64: str, *,
                 replace: bool = False, known_hosts: Path | None = None) -> None:
    """Record a host key as the one to expect for this address."""
    known_hosts = known_hosts or known_hosts_path()
    known_hosts.parent.mkdir(parents=True, exist_ok=True)
    keys = paramiko.HostKeys()
    if known_hosts.is_file():
        keys.load(str(known_hosts))
    name = address.known_hosts_name
    if replace and name in keys:
        del keys[name]
    try:
        key = paramiko.PKey.from_type_string(key_type, base64.b64decode(key_base64))
    except (paramiko.SSHException, ValueError) as exc:
        raise DeviceError(f"cannot pin the host key: {exc}", where=str(address)) from None
    keys.add(name, key_type, key)
    keys.save(str(known_hosts))


def pinned_fingerprint(address: DeviceAddress, known_hosts: Path | None = None) -> str | None:
    known_hosts = known_hosts or known_hosts_path()
    if not known_hosts.is_file():
        return None
    keys = paramiko.HostKeys(str(known_hosts)).lookup(address.known_hosts_name)
    if not keys:
        return None
    return fingerprint(next(iter(keys.values())))
