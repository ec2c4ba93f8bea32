"""The pull path, one function per command: `edgekit channel publish|promote|pause|status`,
`edgekit agent install|poll`, `edgekit fleet status --channel`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.channel import agent as _agent
from edgekit.channel.index import Index, parse_max_fail, parse_percents
from edgekit.channel.publish import ChannelChange, failures, load_index, reports_for
from edgekit.channel.publish import pause as _pause, promote as _promote, publish as _publish
from edgekit.channel.reports import DeviceReport, read_reports
from edgekit.errors import ConfigError, RolloutHalted
from edgekit.transport import open_device


def publish(bundle: Path, channel: Path, percent: str = "100", max_fail: str = "0",
            seed: str | None = None, dry_run: bool = False) -> ChannelChange:
    return _publish(bundle, channel, parse_percents(percent), parse_max_fail(max_fail), seed,
                    dry_run)


def promote(channel: Path, percent: str | None = None, max_fail: str | None = None,
            every_s: float | None = None, dry_run: bool = False,
            on_change: Callable[[ChannelChange], None] | None = None) -> ChannelChange:
    """One promotion step; with `every_s`, one step every `every_s` seconds until the last
    step or a pause. A pause (the reported failures over max-fail) raises RolloutHalted."""
    steps = parse_percents(percent) if percent else None
    limit = parse_max_fail(max_fail) if max_fail else None
    while True:
        change = _promote(channel, steps, limit, dry_run)
        if on_change:
            on_change(change)
        if change.action == "paused":
            raise RolloutHalted(f"channel {channel.name} paused: {change.reason}",
                                where=str(channel),
                                hint="see `edgekit fleet status --channel` for the failures; "
                                     "`edgekit channel pause --resume` resumes it")
        if every_s is None or dry_run or change.action in ("complete", "unchanged"):
            return change
        steps = limit = None
        time.sleep(every_s)


def pause(channel: Path, resume: bool = False, dry_run: bool = False) -> ChannelChange:
    return _pause(channel, resume, dry_run)


@dataclass(frozen=True)
class ChannelStatus:
    index: Index | None
    reports: list[DeviceReport]
    failed: int
    tried: int


def status(channel: str) -> ChannelStatus:
    """The channel's index (when `channel` is its folder) and the devices' reports (folder or
    URL)."""
    if channel.startswith(("http://", "https://")):
        reports = read_reports(channel)
        return ChannelStatus(None, reports, sum(r.state == "failed" for r in reports),
                             sum(r.state in ("failed", "updated", "current") for r in reports))
    folder = Path(channel)
    index = load_index(folder)
    if index is None:
        raise ConfigError(f"no channel at {folder}", key="channel")
    reports = reports_for(folder, index)
    failed, tried = failures(index, reports)
    return ChannelStatus(index, reports, failed, tried)


def install_agent(host: str, channel_url: str, device_id: str | None = None,
                  identity: Path | None = None, timer: str = "auto", interval_s: int = 300,
                  runtime: str | None = None, dry_run: bool = False) -> _agent.AgentInstall:
    with open_device(host, identity) as conn:
        name = device_id or _default_id(host)
        return _agent.install_agent(conn, channel_url, name, runtime, timer, interval_s,
                                    dry_run)


def poll_agent(host: str, identity: Path | None = None) -> tuple[int, str]:
    with open_device(host, identity) as conn:
        return _agent.poll(conn)


def _default_id(host: str) -> str:
    """A registered name as it is; user@host:port → host-port (a plain name)."""
    text = host.rsplit("@", 1)[-1].replace(":", "-").replace("/", "-").strip("-.")
    return text[-64:].lstrip("-._") or "device"


__all__ = ["ChannelChange", "ChannelStatus", "install_agent", "pause", "poll_agent", "promote",
           "publish", "status"]
