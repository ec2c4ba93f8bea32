"""`edgekit channel publish|promote|pause|status`: a release channel written as plain files
that any static web server or object store serves (layout: channel/index.py).

The controller never talks to a device here: publish writes the release's files by sha256 and
a signed index; promote reads the devices' status reports and rewrites the index (the next
percent step, or paused when the reported failures exceed max-fail). Each rewrite raises the
index's serial and is signed again with the user's key (toolchain/signing.py, the key that
signs bundles): devices verify it against their allowed signers.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from edgekit.channel.index import (BLOBS, INDEX, INDEX_SIG, NAME, STATUS, ChannelFile, Index,
                                   Release, over_limit, parse_index)
from edgekit.channel.payload import sign_file, write_payload
from edgekit.channel.reports import DeviceReport, read_reports
from edgekit.config.address import safe_name
from edgekit.errors import ConfigError
from edgekit.models.bundle import load_bundle


@dataclass(frozen=True)
class ChannelChange:
    """What a channel command changed (or, with dry_run, would change)."""

    channel: Path
    index: Index
    previous: Index | None
    new_blobs: tuple[str, ...]
    new_bytes: int
    action: str            # published | raised | paused | resumed | unchanged | complete
    reason: str = ""
    dry_run: bool = False


def channel_dir(path: Path) -> Path:
    """DIR/NAME: NAME a plain name (the URL's last part on the server)."""
    if not NAME.fullmatch(path.name):
        raise ConfigError(f"the channel's name {path.name!r} is not a plain name (letters, "
                          "digits, . _ -)", key="channel", hint="--channel DIR/NAME")
    return path


def load_index(channel: Path) -> Index | None:
    path = channel / INDEX
    if not path.is_file():
        return None
    return parse_index(path.read_text(), str(path))


def require_index(channel: Path) -> Index:
    index = load_index(channel)
    if index is None:
        raise ConfigError(f"no channel at {channel} (no {INDEX})", key="channel",
                          hint="`edgekit channel publish BUNDLE --channel DIR/NAME` creates it")
    return index


def publish(bundle_path: Path, channel: Path, steps: tuple[int, ...] = (100,),
            max_fail: str = "0", seed: str | None = None, dry_run: bool = False
            ) -> ChannelChange:
    """Put the bundle's release on the channel for devices of its arch, at the first of
    `steps` percent (the other arches' releases stay, under the same rollout)."""
    channel = channel_dir(channel)
    previous = load_index(channel)
    blobs = channel.parent / BLOBS
    with load_bundle(bundle_path) as bundle, \
            tempfile.TemporaryDirectory(prefix="edgekit-channel-") as tmp:
        payload = write_payload(bundle, Path(tmp) / "payload")
        arch = bundle.manifest.arch
        app = safe_name(payload.app, "app")
        if previous is not None and previous.app != app:
            raise ConfigError(f"channel {channel.name} carries {previous.app}, not {app}",
                              key="channel", hint="one app per channel: publish to another")
        files = tuple(ChannelFile(sha, (payload.directory / rel).stat().st_size, rel)
                      for rel, sha in sorted(payload.files.items()))
        new = tuple(f for f in files if not (blobs / f.sha256).is_file())
        others = tuple(r for r in (previous.releases if previous else ()) if r.arch != arch)
        index = Index(channel=channel.name, serial=(previous.serial + 1) if previous else 1,
                      app=app, percent=steps[0], seed=seed or secrets.token_hex(8),
                      steps=steps, max_fail=max_fail, paused=False,
                      releases=(*others, Release(arch, payload.release, payload.created_at,
                                                 files)))
        change = ChannelChange(channel, index, previous, tuple(f.sha256 for f in new),
                               sum(f.size for f in new), "published", dry_run=dry_run)
        if dry_run:
            return change
        blobs.mkdir(parents=True, exist_ok=True)
        for f in {f.sha256: f for f in new}.values():
            part = blobs / f".{f.sha256}.{os.getpid()}"
            shutil.copyfile(payload.directory / f.path, part)
            part.replace(blobs / f.sha256)       # a blob is whole or absent
    _write_index(channel, index)
    return change


def _write_index(channel: Path, index: Index) -> None:
    """Sign and put the index in place: the signature first, then the index (a device that
    fetched between the two renames sees a mismatch, refuses, and takes the pair next poll)."""
    channel.mkdir(parents=True, exist_ok=True)
    status = channel / STATUS
    status.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".index-", dir=channel) as tmp:
        text = Path(tmp) / INDEX
        text.write_text(index.render())
        sign_file(text, Path(tmp) / INDEX_SIG)
        for name in (INDEX_SIG, INDEX):
            os.chmod(Path(tmp) / name, 0o644)
            (Path(tmp) / name).replace(channel / name)


def reports_for(channel: Path | str, index: Index) -> list[DeviceReport]:
    return [r for r in read_reports(channel) if r.channel == index.channel]


def failures(index: Index, reports: list[DeviceReport]) -> tuple[int, int]:
    """(failed, tried): devices that reported trying the channel's releases, and those of
    them that failed."""
    mine = [r for r in reports if r.release in index.release_ids]
    failed = sum(r.state == "failed" for r in mine)
    tried = failed + sum(r.state in ("updated", "current") for r in mine)
    return failed, tried


def promote(channel: Path, steps: tuple[int, ...] | None = None, max_fail: str | None = None,
            dry_run: bool = False) -> ChannelChange:
    """One promotion step: pause when the reported failures of this release exceed max-fail,
    else raise percent to the next step (`steps` and `max_fail` replace the index's)."""
    channel = channel_dir(channel)
    original = require_index(channel)
    index = replace(original, steps=steps or original.steps,
                    max_fail=max_fail or original.max_fail)
    same = index if index == original else index.bumped()   # new steps/max-fail: rewritten
    failed, tried = failures(index, reports_for(channel, index))
    if over_limit(index.max_fail, failed, tried):
        reason = (f"{failed} of {tried} device(s) failed on release {index.release} "
                  f"(max-fail {index.max_fail})")
        return _change(channel, original, index.bumped(paused=True), "paused", reason,
                       dry_run)
    if index.paused:
        return _change(channel, original, same, "unchanged",
                       "the channel is paused: `edgekit channel pause --resume` resumes it",
                       dry_run)
    higher = [p for p in index.steps if p > index.percent]
    if not higher:
        return _change(channel, original, same, "complete",
                       f"at {index.percent}%: the last step", dry_run)
    reason = f"{failed} of {tried} device(s) failed so far (max-fail {index.max_fail})"
    return _change(channel, original, index.bumped(percent=higher[0]), "raised", reason,
                   dry_run)


def pause(channel: Path, resume: bool = False, dry_run: bool = False) -> ChannelChange:
    channel = channel_dir(channel)
    index = require_index(channel)
    if index.paused != resume:
        return _change(channel, index, index, "unchanged",
                       "already " + ("running" if resume else "paused"), dry_run)
    return _change(channel, index, index.bumped(paused=not resume),
                   "resumed" if resume else "paused", "", dry_run)


def _change(channel: Path, before: Index, after: Index, action: str, reason: str,
            dry_run: bool) -> ChannelChange:
    if after != before and not dry_run:
        _write_index(channel, after)
    return ChannelChange(channel, after, before, (), 0, action, reason, dry_run)
