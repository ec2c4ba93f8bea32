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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from edgekit.config.paths import known_hosts_path
from edgekit.errors import (AuthFailed, DeviceUnreachable, HostKeyChanged, HostKeyUnknown,
                            RemoteCommandFailed)
from edgekit.config.address import DeviceAddress

CONNECT_TIMEOUT_S = 15.0    # TCP connect, SSH banner and auth each (emulated devices are slow)
CONNECT_ATTEMPTS = 3        # only for "unreachable"; key and auth failures are not retried


@dataclass(frozen=True)
class RemoteResult:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a host key."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class Connection:
    """One authenticated SSH connection to a device (see module doc for its lifecycle)."""

    def __init__(self, address: DeviceAddress, client: paramiko.SSHClient):
        self.address = address
        self._client = client
        self._sftp: paramiko.SFTPClient | None = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self._client.close()

    def run(self, argv: Sequence[str], *, timeout: float = 300, stdin: bytes | None = None,
            check: bool = True, what: str = "remote command failed") -> RemoteResult:
        """Run argv on the device (each argument shell-quoted); the cwd is the user's home."""
        command = shlex.join(argv)
        transport = self._client.get_transport()
        try:
            channel = transport.open_session(timeout=CONNECT_TIMEOUT_S)
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = self._drain(channel, timeout, command)
            code = channel.recv_exit_status()
        except (paramiko.SSHException, OSError) as exc:
            raise DeviceUnreachable(f"connection lost while running a command: {exc}",
                                    where=str(self.address)) from None
        result = RemoteResult(code, out, err)
        if check and code != 0:
            raise RemoteCommandFailed(what, where=str(self.address), argv=list(argv),
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
                                          where=str(self.address), argv=[command],
                                          returncode=124, stderr_tail=err.decode(errors="replace"))
            select.select([channel], [], [], 0.1)

    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            self._sftp = self._client.open_sftp()
        return self._sftp

    def put(self, local: Path, remote: str) -> int:
        """Upload a file; returns bytes sent (SFTP confirms the size)."""
        try:
            self.sftp.put(str(local), remote, confirm=True)
        except (OSError, paramiko.SSHException) as exc:
            raise RemoteCommandFailed(f"upload failed: {exc}", where=str(self.address),
                                      argv=["sftp put", str(local), remote], returncode=1,
                                      stderr_tail="") from None
        return local.stat().st_size

    def get(self, remote: str, local: Path) -> None:
        try:
            self.sftp.get(remote, str(local))
        except (OSError, paramiko.SSHException) as exc:
            raise RemoteCommandFailed(f"download failed: {exc}", where=str(self.address),
                                      argv=["sftp get", remote, str(local)], returncode=1,
                                      stderr_tail="") from None

    def mkdirs(self, remote: str) -> None:
        """mkdir -p over SFTP (relative paths are relative to the home directory)."""
        current = ""
        for part in remote.strip("/").split("/"):
            current = f"{current}/{part}" if current else (("/" if remote.startswith("/") else "")
                                                           + part)
            try:
                self.sftp.stat(current)
            except FileNotFoundError:
                self.sftp.mkdir(current)

    def rename(self, old: str, new: str) -> None:
        self.sftp.posix_rename(old, new)


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
    key = paramiko.PKey.from_type_string(key_type, base64.b64decode(key_base64))
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
