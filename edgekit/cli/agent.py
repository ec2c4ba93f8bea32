"""`edgekit agent …`: the pull agent on a device (install, poll now). Thin: each command
calls one edgekit.api.channel function and renders."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.main import IDENTITY, cli, examples, handle_errors


@cli.group()
def agent() -> None:
    """The device side of a release channel: a POSIX-shell agent polled by a timer."""


@agent.command("install", epilog=examples(
    "edgekit agent install lab-x86_64-1 --channel http://updates.example/stable",
    "edgekit agent install pi@10.0.0.7 --channel http://u.example/stable --timer cron"))
@click.argument("host", metavar="HOST")
@click.option("--channel", "url", required=True, help="the channel's URL (http(s)://…/NAME)")
@click.option("--device-id", help="the device's id in reports and rollout buckets "
                                  "[default: its registered name or host]")
@click.option("--timer", type=click.Choice(["auto", "systemd", "cron", "none"]),
              default="auto", show_default=True, help="what runs the poll")
@click.option("--interval", "interval_s", default=300, show_default=True,
              help="seconds between polls")
@click.option("--runtime", help="IREE runtime version [default: this edgekit's]")
@IDENTITY
@click.option("--dry-run", is_flag=True, help="say what would change; change nothing")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@handle_errors
def agent_install(host: str, url: str, device_id: str | None, timer: str, interval_s: int,
                  runtime: str | None, identity: Path | None, dry_run: bool,
                  as_json: bool) -> None:
    """Install the agent, its runtime, shims, trusted signers and a timer on HOST (a
    registered name, user@host[:port] or local:DIR)."""
    from edgekit.api.channel import install_agent
    result = install_agent(host, url, device_id, identity, timer, interval_s, runtime,
                           dry_run)
    if as_json:
        render.emit_json(dataclasses.asdict(result))
        return
    would = "would install" if dry_run else "installed"
    render.out.print(f"{escape(result.where)}: {would} the agent as "
                     f"{escape(result.device_id)} for {escape(result.url)} (runtime "
                     f"{result.runtime}, timer: {result.timer}"
                     f"{', runtime provisioned' if result.provisioned else ''})")
    for path in result.uploaded:
        render.out.print(f"  {escape(path)}")


@agent.command("poll")
@click.argument("host", metavar="HOST")
@IDENTITY
@handle_errors
def agent_poll(host: str, identity: Path | None) -> None:
    """Run one poll of HOST's agent now (what its timer runs)."""
    from edgekit.api.channel import poll_agent
    from edgekit.errors import RemoteCommandFailed
    code, err = poll_agent(host, identity)
    if err:
        sys.stderr.write(err + "\n")
    if code != 0:
        raise RemoteCommandFailed(f"the agent's poll exited with {code}", where=host,
                                  argv=["agent.sh", "poll"], returncode=code,
                                  stderr_tail=err[-300:])
    render.out.print(f"{escape(host)}: polled")
