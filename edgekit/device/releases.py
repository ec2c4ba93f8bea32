"""Releases on a device: which is current, the activation history (the device's journal),
activation through the activate shim, rollback and pruning."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from edgekit.device import layout
from edgekit.errors import ConfigError, RemoteCommandFailed
from edgekit.config.address import safe_name
from edgekit.transport.base import Transport


@dataclass(frozen=True)
class ReleaseInfo:
    release: str
    modified: float
    current: bool
    target: str
    created_at: str


def activate(conn: Transport, app: str, release: str, shims: str) -> None:
    """Switch `current` to `release` (atomic rename on the device) and check that it did."""
    conn.run(["sh", f"{shims}/activate.sh", layout.app_dir(app), safe_name(release, "release")],
             what="activation failed")
    if current_release(conn, app) != release:
        raise RemoteCommandFailed("`current` does not point at the release after activation",
                                  where=conn.where, argv=["activate.sh", release],
                                  returncode=1, stderr_tail="")


def rollback(conn: Transport, app: str, shims: str, to: str | None = None) -> tuple[str, str]:
    """Make the previously activated release (or `to`) current again. Returns (from, to)."""
    current = current_release(conn, app)
    names = {name for name, _ in list_releases(conn, app)}
    target = to or previous_release(activation_history(conn, app), current)
    if target is None or target not in names:
        choices = ", ".join(sorted(names - {current})) or "none"
        missing = f" ({target!r} is not on the device)" if target else ""
        raise ConfigError(f"no release to roll back to{missing}", key="to",
                          hint=f"releases on the device besides current: {choices}")
    activate(conn, app, target, shims)
    journal_event(conn, app, "rollback", target)
    return current or "", target


def describe_releases(conn: Transport, app: str) -> list[ReleaseInfo]:
    current = current_release(conn, app)
    infos = []
    for name, mtime in list_releases(conn, app):
        target = created = ""
        try:  # a release whose manifest cannot be read is still listed
            manifest = json.loads(conn.read_text(f"{layout.release_dir(app, name)}/manifest.json")
                                  or "{}")
            target, created = manifest.get("target", ""), manifest.get("created_at", "")
        except (RemoteCommandFailed, ValueError):
            pass
        infos.append(ReleaseInfo(name, mtime, name == current, target, created))
    return infos


def current_release(conn: Transport, app: str) -> str | None:
    link = conn.readlink(layout.current_link(app))
    return link.rsplit("/", 1)[-1] if link else None


def list_releases(conn: Transport, app: str) -> list[tuple[str, float]]:
    """(release, mtime) newest first."""
    entries = conn.listdir(f"{layout.app_dir(app)}/releases") or []
    return sorted(((e.name, e.mtime) for e in entries), key=lambda item: item[1], reverse=True)


def activation_history(conn: Transport, app: str) -> list[str]:
    """Releases in the order they were activated (oldest first), from the device's journal."""
    history = []
    for line in (conn.read_text(layout.journal(app)) or "").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") in ("activate",):
            history.append(str(event.get("release")))
    return history


def prune_releases(conn: Transport, app: str, keep: int) -> tuple[str, ...]:
    """Remove the oldest releases beyond `keep`, never `current` or the rollback target."""
    current = current_release(conn, app)
    history = activation_history(conn, app)
    protected = {current, previous_release(history, current)}
    releases = list_releases(conn, app)
    removable = [name for name, _ in releases if name not in protected]
    excess = max(0, len(releases) - max(keep, 1))
    doomed = removable[len(removable) - excess:] if excess else []
    for name in doomed:
        conn.run(["rm", "-rf", "--", layout.release_dir(app, name)])
    return tuple(doomed)


def previous_release(history: list[str], current: str | None) -> str | None:
    """The release activated before `current` (the rollback target)."""
    for name in reversed(history):
        if name != current:
            return name
    return None


def journal_event(conn: Transport, app: str, event: str, release: str) -> None:
    line = json.dumps({"ts": int(time.time()), "event": event, "release": release}) + "\n"
    conn.append_text(layout.journal(app), line)
