"""`edgekit rollback`: make an earlier release of an app current again (one atomic switch),
provisioning the device's shims first when they are missing or old."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.address import safe_name
from edgekit.device.layout import shims_dir
from edgekit.device.probe import probe as run_probe
from edgekit.device.provision import needs_provisioning, provision, shim_version
from edgekit.device.releases import rollback as switch_back
from edgekit.transport import open_device


@dataclass(frozen=True)
class RolledBack:
    device: str                     # the address the device was reached at
    app: str
    before: str | None              # the release that was current (None: none was)
    after: str                      # the release current now


def rollback(host: str, app: str, to: str | None = None, identity: Path | None = None,
             on_change: Callable[[str], None] | None = None) -> RolledBack:
    """Switch `app` on `host` to release `to` [default: the one activated before current].
    `on_change(step)` is called as the device starts to change."""
    safe_name(app, "app")
    if to:
        safe_name(to, "release")
    with open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
        if on_change:
            on_change(f"the rollback of {app} on {host}")
        if needs_provisioning(info):
            provision(conn, info)
        before, after = switch_back(conn, app, shims_dir(shim_version()), to)
    return RolledBack(device=str(address), app=app, before=before or None, after=after)


__all__ = ["RolledBack", "rollback"]
