"""`edgekit channel …`: a signed release channel in plain files (publish, promote, pause,
status). Thin: each command calls one edgekit.api.channel function and renders."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.common import JSON, WIDE, examples, handle_errors

CHANNEL_HELP = "the channel's folder, DIR/NAME (DIR is what the web server serves)"
DRY_RUN = click.option("--dry-run", is_flag=True, help="say what would change; change nothing")


@click.group()
def channel() -> None:
    """A release channel any web server serves; devices pull from it (`edgekit agent`)."""


def _change_json(change) -> dict:
    data = dataclasses.asdict(change)
    data["channel"] = str(change.channel)
    data["total_bytes"] = change.index.total_bytes
    return data


def _show(change) -> None:
    i = change.index
    would = "would be " if change.dry_run else ""
    render.out.print(f"{escape(change.channel.name)}: {would}{change.action} — release "
                     f"{i.release} of {escape(i.app)} at {i.percent}% (steps "
                     f"{','.join(map(str, i.steps))}, max-fail {i.max_fail}"
                     f"{', paused' if i.paused else ''}), serial {i.serial}")
    if change.action == "published":
        render.out.print(f"  {len(i.files)} files, {i.total_bytes} bytes; "
                         f"{len(change.new_blobs)} new blob(s), {change.new_bytes} bytes "
                         f"{would}added to {escape(str(change.channel.parent / 'blobs'))}")
    if change.reason:
        render.out.print(f"  {escape(change.reason)}")


@channel.command("publish", epilog=examples(
    "edgekit channel publish out/kws --channel site/stable",
    "edgekit channel publish out/kws --channel site/kws --percent 10,50,100"))
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--channel", "channel_dir", required=True, type=click.Path(path_type=Path),
              help=CHANNEL_HELP)
@click.option("--percent", default="100", show_default=True,
              help="rollout steps in percent of devices; the first is live at once")
@click.option("--max-fail", default="0", show_default=True,
              help="failed devices (count, or % of those that tried) before promote pauses")
@click.option("--seed", help="rollout seed (hex) [default: a new random one]")
@DRY_RUN
@JSON
@handle_errors
def channel_publish(bundle: Path, channel_dir: Path, percent: str, max_fail: str,
                    seed: str | None, dry_run: bool, as_json: bool) -> None:
    """Put a bundle's release on a channel: files by sha256 under blobs/, a signed index."""
    from edgekit.api.channel import publish
    change = publish(bundle, channel_dir, percent, max_fail, seed, dry_run)
    render.emit_json(_change_json(change)) if as_json else _show(change)


@channel.command("promote", epilog=examples(
    "edgekit channel promote --channel site/stable",
    "edgekit channel promote --channel site/kws --percent 10,50,100 --max-fail 5%",
    "edgekit channel promote --channel site/kws --every 600"))
@click.option("--channel", "channel_dir", required=True, type=click.Path(path_type=Path),
              help=CHANNEL_HELP)
@click.option("--percent", help="new rollout steps, e.g. 10,50,100")
@click.option("--max-fail", help="new failure limit (count or %)")
@click.option("--every", "every_s", type=float,
              help="repeat: one step every this many seconds until the last step or a pause")
@DRY_RUN
@JSON
@handle_errors
def channel_promote(channel_dir: Path, percent: str | None, max_fail: str | None,
                    every_s: float | None, dry_run: bool, as_json: bool) -> None:
    """Raise the rollout to its next step — or pause the channel when the devices' reports
    show more failures than max-fail."""
    from edgekit.api.channel import promote
    change = promote(channel_dir, percent, max_fail, every_s, dry_run,
                     on_change=None if as_json else _show)
    if as_json:
        render.emit_json(_change_json(change))


@channel.command("pause", epilog=examples(
    "edgekit channel pause --channel site/stable",
    "edgekit channel pause --channel site/stable --resume"))
@click.option("--channel", "channel_dir", required=True, type=click.Path(path_type=Path),
              help=CHANNEL_HELP)
@click.option("--resume", is_flag=True, help="resume a paused channel")
@DRY_RUN
@JSON
@handle_errors
def channel_pause(channel_dir: Path, resume: bool, dry_run: bool, as_json: bool) -> None:
    """Pause the channel (devices keep their release and install nothing new), or resume."""
    from edgekit.api.channel import pause
    change = pause(channel_dir, resume, dry_run)
    render.emit_json(_change_json(change)) if as_json else _show(change)


@channel.command("status", epilog=examples("edgekit channel status --channel site/stable",
                                           "edgekit channel status --channel "
                                           "http://updates.example/stable"))
@click.option("--channel", "channel_source", required=True,
              help="the channel's folder DIR/NAME, or its URL")
@JSON
@WIDE
@handle_errors
def channel_status(channel_source: str, as_json: bool) -> None:
    """The channel's release and rollout, and every device's last report."""
    from edgekit.api.channel import status
    render.channel_status(status(channel_source), as_json)
