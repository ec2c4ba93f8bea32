"""Device addresses (`user@host[:port]`) and the names that go into remote paths, validated.

Everything that reaches a remote shell is validated here first and quoted where it is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import ConfigError

_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
_HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
# a name that is one component of a path (an app, a release, a device id, a channel)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class DeviceAddress:
    user: str
    host: str
    port: int = 22

    def __str__(self) -> str:
        return f"{self.user}@{self.host}" + (f":{self.port}" if self.port != 22 else "")

    @property
    def known_hosts_name(self) -> str:
        """How OpenSSH (and paramiko) name this host in known_hosts."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def parse_address(text: str, default_user: str = "root") -> DeviceAddress:
    """`user@host[:port]` (user optional) → DeviceAddress, refusing anything shell-like."""
    user, _, rest = text.rpartition("@")
    user = user or default_user
    host, port = rest, "22"
    if rest.count(":") == 1:
        host, port = rest.split(":")
    if not _USER.match(user):
        raise ConfigError(f"invalid user name {user!r}", key="host",
                          hint="expected user@host[:port] with a plain user name")
    if not _HOST.match(host):
        raise ConfigError(f"invalid host {host!r}", key="host",
                          hint="expected a host name or IPv4 address, e.g. pi@192.0.2.10:22")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"invalid port {port!r}", key="host", hint="a number from 1 to 65535")
    return DeviceAddress(user, host, int(port))


LOCAL_SCHEME = "local:"


def local_root(text: str) -> Path | None:
    """`local:DIR` (a directory on this machine acting as a device's home) → DIR, as given;
    None for any other address."""
    if not text.startswith(LOCAL_SCHEME):
        return None
    rest = text.removeprefix(LOCAL_SCHEME)
    if not rest:
        raise ConfigError("empty local device directory", key="host",
                          hint="expected local:/path/to/dir (a directory that acts as the "
                               "device's home)")
    return Path(rest).expanduser()


def safe_name(value: str, kind: str) -> str:
    """A name used as one component of a remote path (app, release): letters, digits, . _ -"""
    if not NAME.fullmatch(value) or value in (".", ".."):
        raise ConfigError(f"invalid {kind} name {value!r}", key=kind,
                          hint="use 1-64 letters, digits, '.', '_' or '-', starting with a "
                               "letter or digit")
    return value
