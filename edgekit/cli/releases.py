"""`edgekit releases` and `edgekit rollback`: an app's releases on a device, and the switch
back to an earlier one."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.cli import complete, render
from edgekit.cli.common import IDENTITY, JSON, WIDE, changing, connecting, examples, \
    handle_errors
from edgekit.cli.dry_run import DRY_RUN_HELP, show_dry_run


@click.command(epilog=examples(
    "edgekit releases pi@192.0.2.10 --app kws-mlp",
    "edgekit releases lab-x86_64-1 --app kws-mlp --json"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--app", required=True, help="app name (the recipe's name)",
              shell_complete=complete.apps)
@IDENTITY
@JSON
@WIDE
@handle_errors
def releases(host: str, app: str, identity: Path | None, as_json: bool) -> None:
    """Releases of an app on a device, newest first; * marks current. A release's dataset
    score is its last on this device (`validation.dataset`)."""
    from edgekit.api.releases import releases as list_releases
    from edgekit.config.address import safe_name
    safe_name(app, "app")             # a bad name, before "connecting to …"
    with connecting(host):
        found = list_releases(host, app, identity)
    if as_json:
        render.emit_json([{**vars(i), "dataset": i.dataset and i.dataset.model_dump()}
                          for i in found.releases])
        return
    render.releases_table(found.device, app, found.releases)


@click.command(epilog=examples(
    "edgekit rollback pi@192.0.2.10 --app kws-mlp",
    "edgekit rollback lab-aarch64-1 --app kws-mlp --to RELEASE  # see `releases`",
    "edgekit rollback lab-aarch64-1 --app kws-mlp --dry-run"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--app", required=True, help="app name (the recipe's name)",
              shell_complete=complete.apps)
@click.option("--to", "to", help="release id [default: the one activated before current]")
@IDENTITY
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@JSON
@handle_errors
def rollback(host: str, app: str, to: str | None, identity: Path | None,
             as_json: bool, dry_run: bool = False) -> None:
    """Make the previously activated release current again (atomic switch)."""
    from dataclasses import asdict
    if dry_run:   # the plan, read from the device (cli/dry_run.py renders it)
        from edgekit.api.dry_run import rollback_dry_run
        from edgekit.cli.dry_run import rollback_plan
        return show_dry_run(rollback_dry_run(host, app, to, identity), rollback_plan, as_json)

    from edgekit.api.rollback import rollback as run_rollback
    from edgekit.config.address import safe_name
    safe_name(app, "app")
    if to:
        safe_name(to, "release")
    with connecting(host):
        result = run_rollback(host, app, to, identity, on_change=changing)
    if as_json:
        render.emit_json(asdict(result))
        return
    render.out.print(f"{result.device}: {app} rolled back from {result.before or '(none)'} "
                     f"to {result.after}")
