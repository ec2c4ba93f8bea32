"""Releases on a device: which is current, the activation history (the device's journal),
activation through the activate shim, rollback, pruning, and the clean-up of what an
interrupted deploy left behind.

Two releases are *protected* at every moment: `current` and the rollback target (the release
activated before it). Nothing here removes, moves or rewrites them; a rollback re-checks the
target's sha256 (verify shim) before it goes live.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

from edgekit.device import layout
from edgekit.errors import ConfigError, EdgekitError, RemoteCommandFailed, printable
from edgekit.config.address import safe_name
from edgekit.models.dataset import DatasetScore, read_score
from edgekit.transport.base import Transport


# a release's name as a journal or record may hold it: one safe path component (safe_name)
RELEASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class ReleaseInfo:
    release: str
    modified: float
    current: bool
    target: str
    created_at: str
    dataset: DatasetScore | None = None    # its last dataset-gate score on this device


def dataset_score(event: object) -> DatasetScore | None:
    """A journal line's `scored` event as a DatasetScore; None for any other event and for
    one edgekit did not write (the device is not trusted: DatasetScore checks the metric's
    name and that each figure is a finite number in range)."""
    if not isinstance(event, dict) or event.get("event") != "scored":
        return None
    return read_score(event)


def release_scores(conn: Transport, app: str) -> dict[str, DatasetScore]:
    """Each release's last dataset-gate score in the journal's tail (`scored` events)."""
    scores: dict[str, DatasetScore] = {}
    for line in (conn.read_tail(layout.journal(app)) or "").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        score = dataset_score(event)
        release = event.get("release") if score else None
        if isinstance(release, str) and RELEASE_ID.fullmatch(release):
            scores[release] = score
    return scores


def activate(conn: Transport, app: str, release: str, shims: str) -> None:
    """Switch `current` to `release` (atomic rename on the device) and check that it did."""
    switches = activation_history(conn, app).count(release)
    conn.run(["sh", f"{shims}/activate.sh", layout.app_dir(app), safe_name(release, "release")],
             what="activation failed")
    current = current_release(conn, app)
    if current == release:
        return
    if activation_history(conn, app).count(release) > switches:   # the shim journaled it
        what = (f"another deploy of {app} switched `current` to {current} right after this one "
                f"activated {release}")   # two deploys at once: the last switch wins
    else:
        what = "`current` does not point at the release after activation"
    raise RemoteCommandFailed(what, where=conn.where, argv=["activate.sh", release],
                              returncode=1, stderr_tail="")


def rollback_target(conn: Transport, app: str, to: str | None = None) -> tuple[str | None, str]:
    """(current, the release a rollback would make current): `to`, or the release activated
    before current. Reads the device only; ConfigError when there is none."""
    current = current_release(conn, app)
    names = {name for name, _ in list_releases(conn, app)}
    target = to or previous_release(activation_history(conn, app), current)
    if target is None or target not in names:
        raise _nothing_to_roll_back_to(conn, app, current, names, target)
    return current, target


def rollback(conn: Transport, app: str, shims: str, to: str | None = None) -> tuple[str, str]:
    """Make the previously activated release (or `to`) current again. Returns (from, to)."""
    current, target = rollback_target(conn, app, to)
    verify_release(conn, app, target, shims)
    activate(conn, app, target, shims)
    journal_event(conn, app, "rollback", target)
    return current or "", target


def _nothing_to_roll_back_to(conn: Transport, app: str, current: str | None, names: set[str],
                             target: str | None) -> ConfigError:
    """Why there is no rollback target, and what makes one."""
    listing = f"`edgekit releases {conn.where} --app {app}` lists the releases on the device"
    if target is not None:
        choices = ", ".join(sorted(names - {current})) or "none"
        return ConfigError(f"no release to roll back to ({target!r} is not on the device)",
                           key="to", hint=f"releases on the device besides current: {choices}; "
                                          f"{listing}")
    if current is None:
        return ConfigError(f"no release to roll back to: {app} has no current release on the "
                           "device", where=conn.where,
                           hint=f"deploy it first (`edgekit deploy`); {listing}")
    return ConfigError(
        f"no release to roll back to: {current} (current) is the only release of {app} ever "
        "activated on the device; deploying the same build again makes no new release (a "
        "release is its bundle's content)", where=conn.where,
        hint=f"deploy another build of {app} first, then roll back to this one; {listing}")


def verify_release(conn: Transport, app: str, release: str, shims: str) -> None:
    """Re-check every file of a release on the device against its SHA256SUMS (verify shim);
    a mismatch raises RemoteCommandFailed naming the files, before anything is switched."""
    argv = ["sh", f"{shims}/verify.sh", layout.release_dir(app, release)]
    result = conn.run(argv, check=False)
    if result.returncode == 0:
        return
    lines = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()
    bad = [line for line in lines if not line.startswith("sha256sum:")] or lines[-1:]
    raise RemoteCommandFailed(
        f"release {release} of {app} is corrupted on the device (sha256 mismatch: "
        f"{'; '.join(bad)[:300] or 'no SHA256SUMS'}); not activated", where=conn.where,
        argv=argv, returncode=result.returncode, stderr_tail="",
        hint="deploy the release's bundle again (`edgekit deploy`) to replace its files")


def protected_releases(conn: Transport, app: str) -> tuple[str | None, str | None]:
    """(current, rollback target): the releases nothing may remove or replace."""
    current = current_release(conn, app)
    return current, previous_release(activation_history(conn, app), current)


def describe_releases(conn: Transport, app: str) -> list[ReleaseInfo]:
    current = current_release(conn, app)
    scores = release_scores(conn, app)
    infos = []
    for name, mtime in list_releases(conn, app):
        target = created = ""
        try:  # a release whose manifest cannot be read is still listed
            manifest = json.loads(conn.read_text(f"{layout.release_dir(app, name)}/manifest.json")
                                  or "{}")
            target, created = (printable(str(manifest.get(k) or ""))[:100]
                               for k in ("target", "created_at"))
        except (RemoteCommandFailed, ValueError, AttributeError):   # not a JSON object
            pass
        infos.append(ReleaseInfo(name, mtime, name == current, target, created,
                                 scores.get(name)))
    return infos


def current_release(conn: Transport, app: str) -> str | None:
    link = conn.readlink(layout.current_link(app))
    return link.rsplit("/", 1)[-1] if link else None


@dataclass(frozen=True)
class LiveCheck:
    current: str | None      # the release `current` points at (None: no current release)
    verified: bool           # it is the release asked about, and its files verify


# One command: read `current`; if it is the release asked about, re-check its files (verify
# shim: names, and SHA256SUMS being one the controller writes for the release, then every
# file's sha256). Exit 3: another release (or none) is current.
_LIVE = ('cur=$(readlink "$1" 2>/dev/null) || cur=; printf "%s\\n" "$cur"; '
         '[ "$cur" = "releases/$2" ] || exit 3; '
         'exec sh "$3/verify.sh" "$4" --expect-sums "$5"')


def live_release(conn: Transport, app: str, release: str, shims: str,
                 expected_sums: tuple[str, ...]) -> LiveCheck:
    """Is `release` already live and intact on the device? One round trip, so an update of a
    fleet that already runs a release costs each device one command, not a deploy.
    `expected_sums`: the sha256 of each SHA256SUMS the caller would write for the release
    (one per module a device may run), after checking the manifest's signature itself: the
    device checks that its SHA256SUMS is one of them and that every file matches it."""
    if not expected_sums or not all(re.fullmatch(r"[0-9a-f]{64}", d) for d in expected_sums):
        raise ValueError(f"not sha256s: {expected_sums!r}")
    result = conn.run(["sh", "-c", _LIVE, "live", layout.current_link(app),
                       safe_name(release, "release"), shims, layout.release_dir(app, release),
                       ",".join(expected_sums)], check=False, what="reading the current release")
    link = result.stdout.decode(errors="replace").partition("\n")[0].strip()
    current = link.rsplit("/", 1)[-1] if link else None
    if current is not None:
        try:
            safe_name(current, "release")
        except ConfigError:          # not a name edgekit writes: no release of ours
            current = None
    return LiveCheck(current=current, verified=result.returncode == 0 and current == release)


def list_releases(conn: Transport, app: str) -> list[tuple[str, float]]:
    """(release, mtime) newest first."""
    entries = conn.listdir(f"{layout.app_dir(app)}/releases") or []
    return sorted(((e.name, e.mtime) for e in entries), key=lambda item: item[1], reverse=True)


def activation_history(conn: Transport, app: str) -> list[str]:
    """Releases in the order they were activated (oldest first), from the device's journal."""
    history = []
    for line in (conn.read_tail(layout.journal(app)) or "").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        # the device is not trusted: only events as activate.sh writes them count
        if isinstance(event, dict) and event.get("event") == "activate" \
                and isinstance(event.get("release"), str) \
                and RELEASE_ID.fullmatch(event["release"]):
            history.append(event["release"])
    return history


def prune_releases(conn: Transport, app: str, keep: int) -> tuple[str, ...]:
    """Keep `current`, the rollback target and the newest `keep` activated releases (by their
    last activation); remove the other activated ones. Releases never activated are not
    history: they are not counted here (`clean_leftovers` removes them)."""
    current = current_release(conn, app)
    history = activation_history(conn, app)
    on_device = {name for name, _ in list_releases(conn, app)}
    newest_first = [name for name in dict.fromkeys(reversed(history)) if name in on_device]
    kept = set(newest_first[:max(keep, 1)]) | {current, previous_release(history, current)}
    doomed = [name for name in newest_first if name not in kept]
    for name in doomed:
        conn.run(["rm", "-rf", "--", layout.release_dir(app, name)])
    return tuple(doomed)


# --- what an interrupted deploy leaves behind -------------------------------------------------

FOREIGN_SCRATCH_S = 3600.0   # scratch of a deploy from another host is removed after this age
STALE_LINK_S = 60.0          # activate.sh's temporary link lives for milliseconds


def scratch_owner() -> str:
    """Who owns scratch on devices: this host (hashed name) and this process. Another process
    on this host can tell whether the owner still runs; other hosts go by age."""
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    return f"{host}-{os.getpid()}"


def scratch_token() -> str:
    return f"{scratch_owner()}-{secrets.token_hex(4)}"


def _owner_running(owner: str, age_s: float) -> bool:
    host, _, pid = owner.partition("-")
    if not (pid.isascii() and pid.isdigit() and len(pid) < 10):  # not a name this version
        # writes (the device names these entries): nobody runs it
        return False
    if host != scratch_owner().partition("-")[0]:
        return age_s < FOREIGN_SCRATCH_S
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:       # exists, not ours to signal
        return True
    return True


@contextlib.contextmanager
def in_flight(conn: Transport, app: str, release: str) -> Iterator[None]:
    """Mark `release` as being put live by this process (until the block ends), so that a
    concurrent deploy's clean-up leaves it alone while it is not yet activated."""
    marker = layout.inflight_marker(app, scratch_owner(), release)
    conn.mkdirs(layout.app_dir(app))
    conn.append_text(marker, "")
    try:
        yield
    finally:
        with contextlib.suppress(EdgekitError):
            conn.run(["rm", "-f", "--", marker], check=False)


def clean_leftovers(conn: Transport, app: str, keep: str | None = None) -> tuple[str, ...]:
    """Remove what interrupted or failed deploys of `app` left: staging, validation scratch,
    releases moved aside, and releases never activated — never `current`, the rollback target,
    `keep` (the release being deployed now) or anything a running deploy owns. Returns the
    entries removed (relative to the app's directory)."""
    app_dir = layout.app_dir(app)
    now = time.time()
    running: set[str] = set()      # releases a running deploy is putting live
    doomed: list[str] = []
    for entry in conn.listdir(app_dir) or []:
        name, age = entry.name, now - entry.mtime
        prefix = next((p for p in layout.SCRATCH_PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        if prefix == ".current.":
            if age > STALE_LINK_S:
                doomed.append(name)
            continue
        host, _, rest = name[len(prefix):].partition("-")
        pid, _, tail = rest.partition("-")
        if _owner_running(f"{host}-{pid}", age):
            if prefix == ".inflight-":
                running.add(tail)
            continue
        doomed.append(name)
    current, target = protected_releases(conn, app)
    # activate.sh journals every switch: with a `current` but no journal, history is unknown
    if current is None or conn.read_tail(layout.journal(app), max_bytes=1) is not None:
        spared = set(activation_history(conn, app)) | running | {current, target, keep}
        doomed += [f"releases/{name}" for name, _ in list_releases(conn, app)
                   if name not in spared]
    if doomed:
        conn.run(["rm", "-rf", "--", *(f"{app_dir}/{name}" for name in doomed)],
                 what="removing what earlier deploys left behind")
    return tuple(doomed)


def previous_release(history: list[str], current: str | None) -> str | None:
    """The release activated before `current` (the rollback target)."""
    for name in reversed(history):
        if name != current:
            return name
    return None


def _built_at(text: str) -> datetime.datetime | None:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


def newest_activated(conn: Transport, app: str) -> tuple[str, str] | None:
    """(build time, release) of the newest release ever activated for `app` on the device;
    None when none was (or the record is not one edgekit writes: then nothing is refused)."""
    fields = (conn.read_text(layout.newest_marker(app), max_bytes=512) or "").split()
    if len(fields) != 2 or _built_at(fields[0]) is None \
            or not RELEASE_ID.fullmatch(fields[1]):
        return None
    return fields[0], fields[1]


def is_older(created_at: str, than: str) -> bool:
    """Whether a release built at `created_at` is older than one built at `than`."""
    a, b = _built_at(created_at), _built_at(than)
    return a is not None and b is not None and a < b


def record_newest(conn: Transport, app: str, created_at: str, release: str) -> None:
    """After an activation: remember the release if it is the newest activated so far."""
    newest = newest_activated(conn, app)
    if _built_at(created_at) is None or (newest and not is_older(newest[0], created_at)):
        return
    conn.replace_text(layout.newest_marker(app),
                      f"{created_at} {safe_name(release, 'release')}\n")


def journal_event(conn: Transport, app: str, event: str, release: str,
                  fields: dict | None = None) -> None:
    """One line of the app's journal on the device; `fields`: what the event measured."""
    line = json.dumps({"ts": int(time.time()), "event": event, "release": release,
                       **(fields or {})}) + "\n"
    conn.append_text(layout.journal(app), line)
