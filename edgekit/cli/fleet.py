"""`edgekit fleet …`: update in waves, resume, status, report, export to Ansible."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import JSON, WIDE, examples, handle_errors
from edgekit.cli.dry_run import DRY_RUN_HELP

FLEET_HELP = "fleet.yaml, or an Ansible inventory (INI or YAML)"


@click.group()
def fleet() -> None:
    """Roll a model out to a fleet in waves, gated on numerics and latency."""


def _policy_overrides(canary, waves, concurrency, max_fail, max_p90_ratio,
                      rollback_on_halt) -> dict:
    given = {"canary": canary, "concurrency": concurrency, "max_fail": max_fail,
             "max_p90_ratio": max_p90_ratio, "rollback_on_halt": rollback_on_halt}
    if waves:
        given["waves"] = [_count(w) for w in waves.split(",")]
    for key in ("canary", "max_fail"):
        if given[key] is not None:
            given[key] = _count(given[key])
    if max_p90_ratio == 0:
        given["max_p90_ratio"] = None
        return {k: v for k, v in given.items() if v is not None or k == "max_p90_ratio"}
    return {k: v for k, v in given.items() if v is not None}


def _count(text: str) -> int | str:
    text = text.strip()
    return int(text) if text.isdigit() else text


def _device_done(e) -> str:
    colour = {"failed": "red"}.get(e.status, "green")
    reason = f" — {escape(e.reason)}" if e.reason else ""
    return f"  [{colour}]{e.status}[/] {escape(e.device)} ({e.seconds:.1f} s){reason}"


def _renderers() -> dict[type, Callable]:
    """Rollout event type → its progress line (events not listed print nothing)."""
    from edgekit.models import events as ev
    return {
        ev.DevicePreflight: lambda e: f"  [green]reachable[/] {escape(e.device)}" if e.ok else
        f"  [red]cannot take the release[/] {escape(e.device)}: {escape(e.reason)}",
        ev.BuildStarted: lambda e: f"building for {escape(e.target)}…",
        ev.RolloutStarted: lambda e: f"start rollout {e.rollout}",
        ev.RolloutResumed: lambda e: f"resume rollout {e.rollout}",
        ev.AlreadyFinished: lambda e: f"rollout {e.rollout} had finished ({e.status}): "
                                      "nothing to resume; its result:",
        ev.WaveStarted: lambda e: f"[bold]wave {e.wave}[/]: {len(e.devices)} device(s)",
        ev.DeviceDone: _device_done,
        ev.Halted: lambda e: f"[red]halted[/]: {escape(e.reason)}",
        ev.DeviceRolledBack: lambda e: f"  {e.status} {escape(e.device)}",
        ev.JournalRepaired: lambda e: f"[yellow]the journal's last line was torn (a crash "
                                      f"while writing it): {e.bytes} bytes set aside in "
                                      f"{escape(e.set_aside)}[/]",
    }


def _progress(event) -> None:
    render_line = _renderers().get(type(event))
    if render_line is not None:
        render.progress(render_line(event))


def _show(result, as_json: bool, html: Path | None) -> None:
    """The result (its HTML report, if asked for, is written by the api call)."""
    if as_json:
        render.emit_json(result.model_dump(mode="json"))
    else:
        render.fleet_result(result)
        if html:
            render.out.print(f"report: {html}")


def _finish(result, as_json: bool, html: Path | None) -> None:
    """Show the result; a halted or interrupted rollout is a RolloutHalted."""
    from edgekit.errors import RolloutHalted
    _show(result, as_json, html)
    if result.status == "halted":
        raise RolloutHalted(f"rollout {result.id} halted: {result.halt_reason}",
                            hint="see the per-device reasons above; devices that did not "
                                 "take the release kept their previous one")
    if result.status == "interrupted":
        raise RolloutHalted(f"rollout {result.id} was interrupted",
                            hint=f"continue it with `edgekit fleet resume {result.id}`")


@fleet.command("update", epilog=examples(
    "edgekit fleet update --fleet fleet.yaml --recipe recipes/kws_mlp.yaml",
    "edgekit fleet update --fleet fleet.yaml --recipe r.yaml --limit GROUP",
    "edgekit fleet update --fleet f.yaml --recipe r.yaml --rollback-on-halt all",
    "edgekit fleet update --fleet f.yaml --recipe r.yaml --dry-run"))
@click.option("--fleet", "fleet_file", required=True, type=click.Path(path_type=Path),
              help=FLEET_HELP)
@click.option("--recipe", required=True, type=click.Path(path_type=Path), help="recipe YAML")
@click.option("--limit", help="only these devices: a device or group name, or label=value")
@click.option("--canary", help="first wave: devices (or %) per target profile")
@click.option("--waves", help="wave sizes after the canary, e.g. 1,10%,50%,100%")
@click.option("--concurrency", type=int, help="devices updated at once within a wave")
@click.option("--max-fail", help="failures a wave may have (count or %); more halts")
@click.option("--max-p90-ratio", type=float,
              help="latency gate: new p90 / replaced release's p90 (0 disables)")
@click.option("--rollback-on-halt", type=click.Choice(["none", "wave", "all"]), is_flag=False,
              flag_value="wave", help="on halt, return updated devices of the failed wave "
              "(default when given without a value) or of all waves to their previous release")
@click.option("--keep", default=3, show_default=True, help="releases kept on each device")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has the builds")
@click.option("--cpu-fallback", is_flag=True,
              help="NPU targets: deploy their IREE CPU module on devices without the NPU")
@click.option("--allow-downgrade", is_flag=True,
              help="deploy a build older than a device's newest release (journaled on it)")
@click.option("--revalidate", is_flag=True,
              help="devices already running the release: deploy and validate them again "
                   "(default: their files are verified, one command each)")
@click.option("--html", type=click.Path(path_type=Path), help="also write an HTML report")
@JSON
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@WIDE
@handle_errors
def fleet_update(fleet_file: Path, recipe: Path, limit, canary, waves, concurrency, max_fail,
                 max_p90_ratio, rollback_on_halt, keep: int, no_cache: bool,
                 cpu_fallback: bool, allow_downgrade: bool, revalidate: bool,
                 html: Path | None, as_json: bool, dry_run: bool = False) -> None:
    """Build once per target, then update the fleet in waves with health gates."""
    from edgekit.api.fleet import UpdateOptions, update
    overrides = _policy_overrides(canary, waves, concurrency, max_fail, max_p90_ratio,
                                  rollback_on_halt)
    options = UpdateOptions(fleet=fleet_file, recipe=recipe, limit=limit, policy=overrides,
                            keep=keep, use_cache=not no_cache, cpu_fallback=cpu_fallback,
                            revalidate=revalidate, allow_downgrade=allow_downgrade)
    if dry_run:   # the plan, read from the devices (cli/dry_run.py renders it)
        from edgekit.api.dry_run import fleet_update_dry_run
        from edgekit.cli.dry_run import fleet_plan, show_dry_run
        return show_dry_run(fleet_update_dry_run(options), fleet_plan, as_json)
    result = update(options, on_event=_progress, html=html)
    _finish(result, as_json, html)


@fleet.command("resume", epilog=examples(
    "edgekit fleet resume",
    "edgekit fleet resume 20261202-0930"))
@click.argument("rollout", required=False)
@click.option("--html", type=click.Path(path_type=Path), help="also write an HTML report")
@JSON
@WIDE
@handle_errors
def fleet_resume(rollout: str | None, html: Path | None, as_json: bool) -> None:
    """Continue an interrupted rollout [default: the newest unfinished one]."""
    from edgekit.api.fleet import resume
    _finish(resume(rollout, on_event=_progress, html=html), as_json, html)


@fleet.command("report", epilog=examples(
    "edgekit fleet report",
    "edgekit fleet report 20261202-0930 --html fleet.html"))
@click.argument("rollout", required=False)
@click.option("--html", type=click.Path(path_type=Path), help="also write an HTML report")
@JSON
@WIDE
@handle_errors
def fleet_report(rollout: str | None, html: Path | None, as_json: bool) -> None:
    """Show a rollout's result from its journal [default: the newest]."""
    from edgekit.api.fleet import report
    _show(report(rollout, html=html), as_json, html)


@fleet.command("status", epilog=examples(
    "edgekit fleet status --fleet fleet.yaml --app kws-mlp",
    "edgekit fleet status --channel http://updates.example/stable"))
@click.option("--fleet", "fleet_file", type=click.Path(path_type=Path), help=FLEET_HELP)
@click.option("--channel", "channel_source",
              help="instead of --fleet: the reports of a release channel's devices (its "
                   "folder DIR/NAME or URL)")
@click.option("--app", help="app name [default: the --recipe's name]",
              shell_complete=complete.apps)
@click.option("--recipe", type=click.Path(path_type=Path), help="recipe YAML (for its name)")
@click.option("--limit", help="only these devices: a device or group name, or label=value")
@JSON
@WIDE
@handle_errors
def fleet_status(fleet_file: Path | None, channel_source: str | None, app: str | None,
                 recipe: Path | None, limit: str | None, as_json: bool) -> None:
    """Every device's current release, runtime version and last validation."""
    if (fleet_file is None) == (channel_source is None):
        from edgekit.errors import ConfigError
        raise ConfigError("give exactly one of --fleet or --channel", key="fleet")
    if channel_source is not None:
        from edgekit.api.channel import status as channel_status
        render.channel_status(channel_status(channel_source), as_json)
        return
    from edgekit.api.fleet import status
    with render.steps("") as progress:
        found = status(fleet_file, app, recipe, limit, on_progress=progress.update)
    if as_json:
        render.emit_json([r.model_dump(mode="json") for r in found.devices])
    else:
        render.fleet_status_table(found.app, found.devices)


@fleet.command("export-ansible", epilog=examples(
    "edgekit fleet export-ansible --fleet fleet.yaml --recipe kws.yaml",
    "edgekit fleet export-ansible --fleet hosts.ini --recipe kws.yaml --out ans"))
@click.option("--fleet", "fleet_file", required=True, type=click.Path(path_type=Path),
              help=FLEET_HELP)
@click.option("--recipe", required=True, type=click.Path(path_type=Path), help="recipe YAML")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="directory for the playbook, inventory, bundles and device programs")
@click.option("--limit", help="only these devices: a device or group name, or label=value")
@JSON
@handle_errors
def fleet_export_ansible(fleet_file: Path, recipe: Path, out: Path, limit: str | None,
                         as_json: bool) -> None:
    """Write an Ansible playbook + inventory doing the same staged rollout."""
    from edgekit.api.fleet import export_ansible
    written = export_ansible(fleet_file, recipe, out, limit=limit)
    if as_json:
        render.emit_json({"playbook": str(written.playbook), "inventory": str(written.inventory),
                          "config": str(written.config), "command": written.command()})
        return
    render.out.print(f"wrote {written.playbook}, {written.inventory} and {written.config}\n"
                     f"run: {written.command()}\n"
                     "(the devices need python3: Ansible's modules run on them)",
                     markup=False, highlight=False, soft_wrap=True)


@fleet.command("check-outputs", epilog=examples(
    "edgekit fleet check-outputs out/bundles/kws-rpi4 outputs.tar"))
@click.argument("release", type=click.Path(path_type=Path))
@click.argument("outputs", type=click.Path(path_type=Path))
@JSON
@handle_errors
def fleet_check_outputs(release: Path, outputs: Path, as_json: bool) -> None:
    """Compare a device's outputs (the exported playbook's tar, or a directory:
    sample_<k>/output_<i>.npy) with every validation sample of a release's golden outputs
    (what the exported Ansible playbook runs on the controller). Exit 8 when they differ."""
    from edgekit.api.fleet import check_outputs
    from edgekit.errors import ValidationFailed
    report = check_outputs(release, outputs)
    if as_json:
        render.emit_json(report.model_dump(mode="json"))
    else:
        render.validation_table(report)
    if not report.ok:
        raise ValidationFailed(f"outputs from {report.where} differ from the golden outputs",
                               report=report)
