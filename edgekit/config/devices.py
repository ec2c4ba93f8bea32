"""Known devices: a name → address + identity registry ($EDGEKIT_HOME/devices.json).

`edgekit lab up` registers its devices here; `--host` accepts a registered name as well as
`user@host[:port]`, and a registered address brings its identity with it.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.config.paths import edgekit_home
from edgekit.config.stamped import StampedCache
from edgekit.config.schema_base import Frozen, load_model_map, save_model_map
from edgekit.errors import ConfigError
from edgekit.config.address import DeviceAddress, parse_address


class DeviceEntry(Frozen):
    name: str
    address: str            # user@host:port
    identity: str           # private key path
    arch: str = ""
    lab: bool = False


def registry_path() -> Path:
    return edgekit_home() / "devices.json"


_registry = StampedCache(lambda path: load_model_map(path, DeviceEntry), keep=16)


def load_registry() -> dict[str, DeviceEntry]:
    """The registered devices (a copy to change and save). Parsed again only when the file
    changed: a fleet of 10,000 devices resolves each name against it, and every connection
    does too."""
    try:
        return dict(_registry.get(registry_path()))
    except FileNotFoundError:
        return {}


def save_registry(entries: dict[str, DeviceEntry]) -> None:
    save_model_map(registry_path(), entries)


def device_label(host: str) -> str:
    """How results name the device `host` designates: its registered name (also when given by
    an address a registered device has), else the address as given."""
    registry = load_registry()
    if host in registry:
        return host
    try:
        address = parse_address(host)
    except ConfigError:
        return host
    entry = next((e for e in registry.values() if parse_address(e.address) == address), None)
    return entry.name if entry else host


def lookup_device(host: str) -> tuple[DeviceAddress, DeviceEntry | None]:
    """A registered name or user@host[:port]/an address → its address and registry entry (if
    any). A bare word that is not registered is an error naming the registered devices."""
    registry = load_registry()
    entry = registry.get(host)
    if entry is None and "@" not in host and "." not in host and ":" not in host:
        # a bare word is a device name, never a host name to log in to as root
        known = ", ".join(sorted(registry)) or "none (`edgekit lab up` registers lab devices)"
        raise ConfigError(f"unknown device {host!r}; registered devices: {known}", key="host",
                          hint="name a registered device (`edgekit devices list`) or give "
                               "user@host[:port]")
    address = parse_address(entry.address if entry else host)
    if entry is None:
        entry = next((e for e in registry.values() if parse_address(e.address) == address), None)
    return address, entry


def resolve_device(host: str, identity: Path | None = None) -> tuple[DeviceAddress, Path]:
    """`--host` (a registered name or user@host[:port]) + optional `--identity` → where to
    connect and with which key."""
    address, entry = lookup_device(host)
    if identity is not None:
        return address, identity
    if entry is not None:
        return address, Path(entry.identity)
    for candidate in ("id_ed25519", "id_ecdsa", "id_rsa"):
        path = Path.home() / ".ssh" / candidate
        if path.is_file():
            return address, path
    # nothing was tried: a configuration gap, not a refusal by the device
    raise ConfigError("no identity to log in with (no --identity, no registered key, no "
                      "~/.ssh/id_ed25519, id_ecdsa or id_rsa); nothing was sent to the device",
                      where=str(address), key="identity",
                      hint="pass --identity PATH (a private key the device accepts)")
