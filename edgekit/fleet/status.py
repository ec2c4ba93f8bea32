"""`edgekit fleet status`: every device's current release, runtime version and last on-device
validation, read from the devices themselves (concurrently; an unreachable device is a row
that says so, not an error)."""

from __future__ import annotations

import datetime
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from edgekit.config.fleet import Fleet, FleetDevice
from edgekit.device import layout
from edgekit.device.bench import remote_manifest
from edgekit.device.releases import current_release
from edgekit.errors import EdgekitError
from edgekit.models.fleet import FleetDeviceStatus, LastValidation
from edgekit.config.address import safe_name
from edgekit.transport import open_device
from edgekit.transport.base import Transport

VALIDATION_EVENTS = ("validated", "rejected")


def fleet_status(fleet: Fleet, app: str, concurrency: int = 8) -> list[FleetDeviceStatus]:
    app = safe_name(app, "app")
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="status") as pool:
        return list(pool.map(lambda d: device_status(d, app), fleet.devices))


def device_status(device: FleetDevice, app: str) -> FleetDeviceStatus:
    row = FleetDeviceStatus(device=device.name, address=device.address, target=device.target,
                            groups=tuple(device.groups), labels=dict(device.labels))
    read: dict = {}
    try:
        identity = Path(device.identity) if device.identity else None
        with open_device(device.address, identity) as conn:
            read["reachable"] = True
            current = read["current"] = current_release(conn, app)
            if current:
                manifest = remote_manifest(conn, app, current)
                read["built_for"] = manifest.target
                read["runtime"] = f"iree {manifest.compiler_version}"
            read["last_validation"] = last_validation(conn, app)
    except EdgekitError as exc:
        read["error"] = f"{type(exc).__name__}: {exc.what}"
    return row.model_copy(update=read)


def last_validation(conn: Transport, app: str) -> LastValidation | None:
    """The newest validated/rejected event of the device's journal for `app`."""
    for line in reversed((conn.read_tail(layout.journal(app)) or "").splitlines()):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") in VALIDATION_EVENTS:
            when = datetime.datetime.fromtimestamp(int(event.get("ts", 0)),
                                                   datetime.timezone.utc)
            return LastValidation(release=str(event.get("release")),
                                  ok=event["event"] == "validated",
                                  at=when.isoformat(timespec="seconds"))
    return None
