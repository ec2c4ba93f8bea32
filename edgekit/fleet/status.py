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
from edgekit.device.releases import RELEASE_ID, current_release, dataset_score
from edgekit.errors import DeviceAnswerRefused, EdgekitError, printable
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


# what a journal's event may hold (the device is not trusted): a time between 1970 and 2100,
# a release name as activate.sh takes them (RELEASE_ID)
TS_MAX = 4102444800


def last_validation(conn: Transport, app: str) -> LastValidation | None:
    """The newest validated/rejected event of the device's journal for `app` (read from its
    end). A line that is not a JSON object is skipped (a torn write); a validation event whose
    time or release is not one edgekit writes is DeviceAnswerRefused: that device's row says
    so, the other rows are unaffected."""
    lines = (conn.read_tail(layout.journal(app)) or "").splitlines()
    for number, line in enumerate(reversed(lines)):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("event") not in VALIDATION_EVENTS:
            continue
        ts, release = event.get("ts"), event.get("release")
        if type(ts) is not int or not 0 <= ts <= TS_MAX or not isinstance(release, str) \
                or not RELEASE_ID.fullmatch(release):
            raise DeviceAnswerRefused(
                f"journal of {app}, line {number + 1} from the end: a {event['event']} event "
                f"edgekit did not write (ts {printable(repr(ts))[:40]}, release "
                f"{printable(repr(release))[:80]})", where=conn.where,
                hint="the device's journal was changed outside edgekit")
        when = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
        return LastValidation(release=release, ok=event["event"] == "validated",
                              at=when.isoformat(timespec="seconds"),
                              dataset=_score_before(lines[:len(lines) - number - 1], release))
    return None


def _score_before(lines: list[str], release: str) -> str | None:
    """The dataset gate's score of `release`: its `scored` event just before the validation
    event (no other validation between). Untrusted: an event edgekit did not write is left
    out (None; device/releases.py's dataset_score checks it)."""
    for line in reversed(lines[-20:]):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("event") in VALIDATION_EVENTS:
            return None
        if event.get("event") != "scored" or event.get("release") != release:
            continue
        score = dataset_score(event)
        return None if score is None else str(score)
    return None
