"""`edgekit agent …`: what pulls releases onto a device — the channel agent (install, poll
now) or, with --mender, edgekit's Mender update module. Thin: each command calls one
edgekit.api function and renders."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import IDENTITY, JSON, examples, handle_errors


@click.group()
def agent() -> None:
    """Put what pulls and installs releases on a device: the channel agent or Mender's
    update module."""


@agent.command("install", epilog=examples(
    "edgekit agent install lab-x86_64-1 --channel http://updates.example/stable",
    "edgekit agent install pi@10.0.0.7 --channel http://u.example/k --timer cron",
    "edgekit agent install --mender pi@10.0.0.7"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--channel", "url", help="the pull agent for this channel's URL "
                                       "(http(s)://…/NAME)")
@click.option("--mender", is_flag=True,
              help="instead: edgekit's Mender update module (mender-client 3.x)")
@click.option("--device-id", help="--channel: the device's id in reports and rollout buckets "
                                  "[default: its registered name or host]")
@click.option("--timer", type=click.Choice(["auto", "systemd", "cron", "none"]),
              default="auto", show_default=True, help="--channel: what runs the poll")
@click.option("--interval", "interval_s", default=300, show_default=True,
              help="--channel: seconds between polls")
@click.option("--runtime", help="--channel: IREE runtime version [default: this edgekit's]")
@click.option("--modules-dir", default=None,
              help="--mender: where the client reads update modules (default "
                   "/usr/share/mender/modules/v3)")
@IDENTITY
@click.option("--dry-run", is_flag=True,
              help="--channel: say what would change; change nothing")
@JSON
@handle_errors
def agent_install(host: str, url: str | None, mender: bool, device_id: str | None,
                  timer: str, interval_s: int, runtime: str | None, modules_dir: str | None,
                  identity: Path | None, dry_run: bool, as_json: bool) -> None:
    """Install on HOST (a registered name, user@host[:port] or local:DIR) what pulls
    releases: the channel agent, its runtime, shims, trusted signers and a timer (--channel),
    or edgekit's Mender update module with the shims, runtime and signers (--mender)."""
    from edgekit.errors import ConfigError
    if (url is None) == (not mender):
        raise ConfigError("give exactly one of --channel URL or --mender", key="channel")
    if mender:
        _install_mender(host, modules_dir, identity, as_json)
        return
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


def _install_mender(host: str, modules_dir: str | None, identity: Path | None,
                    as_json: bool) -> None:
    from edgekit.api.mender import MODULES_DIR, install_mender_module
    result = install_mender_module(host, modules_dir or MODULES_DIR, identity)
    if as_json:
        render.emit_json({"host": host, "module": result.module, "shims": result.shims,
                          "runtime": result.runtime, "uploaded": list(result.uploaded)})
        return
    render.out.print(f"installed the edgekit update module at {escape(result.module)} on "
                     f"{escape(host)} ({len(result.uploaded)} file(s) sent)", highlight=False)


@agent.command("poll", epilog=examples(
    "edgekit agent poll pi@192.0.2.10",
    "edgekit agent poll lab-x86_64-1 --json"))
@click.argument("host", shell_complete=complete.devices)
@IDENTITY
@JSON
@handle_errors
def agent_poll(host: str, identity: Path | None, as_json: bool) -> None:
    """Run one poll of HOST's agent now (what its timer runs)."""
    from edgekit.api.channel import poll_agent
    from edgekit.errors import RemoteCommandFailed
    code, err = poll_agent(host, identity)
    if code == 0 and err:
        sys.stderr.write(err + "\n")
    if code != 0:
        raise RemoteCommandFailed(f"the agent's poll exited with {code}", where=host,
                                  argv=["agent.sh", "poll"], returncode=code,
                                  stderr_tail=err[-300:],
                                  hint="no agent there? `edgekit agent install HOST --channel "
                                       "URL`" if code in (2, 127) else None)
    if as_json:
        render.emit_json({"host": host, "exit": code, "stderr": err})
    else:
        render.out.print(f"{escape(host)}: polled")
