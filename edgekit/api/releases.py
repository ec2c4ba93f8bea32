"""`edgekit releases`: the releases of an app on a device, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.config.address import safe_name
from edgekit.config.devices import device_label
from edgekit.device.releases import ReleaseInfo, describe_releases
from edgekit.transport import open_device


@dataclass(frozen=True)
class Releases:
    device: str                     # the registered name, else the address
    app: str
    releases: tuple[ReleaseInfo, ...]   # newest first


def releases(host: str, app: str, identity: Path | None = None) -> Releases:
    safe_name(app, "app")
    with open_device(host, identity) as conn:
        infos = describe_releases(conn, app)
    return Releases(device=device_label(host), app=app, releases=tuple(infos))


__all__ = ["ReleaseInfo", "Releases", "releases"]
