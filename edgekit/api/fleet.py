"""Fleet commands composed with the build: the recipe is built once per target profile in the
fleet (steered like `edgekit build`), then handed to the rollout or the Ansible export; and
the views of a fleet (a rollout's result, every device's current release)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.api.build import BuildOptions, build
from edgekit.fleet.ansible_export import AnsibleExport, export_ansible as write_ansible
from edgekit.fleet.rollout import BuildFor, Progress, UpdateOptions, update as run_update
from edgekit.models.fleet import FleetDeviceStatus, FleetResult
from edgekit.models.report import ValidationReport


@dataclass(frozen=True)
class FleetStatus:
    app: str
    devices: list[FleetDeviceStatus]


def builder(recipe: Path, use_cache: bool = True) -> BuildFor:
    """target profile → the recipe's bundle for it."""
    return lambda target: build(BuildOptions(recipe=recipe, target=target,
                                             use_cache=use_cache)).bundle


def update(options: UpdateOptions, on_event: Progress | None = None,
           html: Path | None = None) -> FleetResult:
    """Build the recipe for every target profile in the fleet, then roll it out in waves
    (an HTML report written to `html` if given)."""
    return _reported(run_update(options, builder(options.recipe, options.use_cache), on_event),
                     html)


def resume(rollout: str | None = None, on_event: Progress | None = None,
           html: Path | None = None) -> FleetResult:
    """Continue an interrupted rollout [default: the newest unfinished one]."""
    from edgekit.fleet.rollout import resume as run_resume
    return _reported(run_resume(rollout, on_event=on_event), html)


def report(rollout: str | None = None, html: Path | None = None) -> FleetResult:
    """A rollout's result from its journal [default: the newest]."""
    from edgekit.fleet.rollout import rollout_result
    return _reported(rollout_result(rollout), html)


def status(fleet: Path, app: str | None = None, recipe: Path | None = None,
           limit: str | None = None, on_progress: Callable[[str], None] | None = None
           ) -> FleetStatus:
    """Every (selected) device's current release of the app (named, or the recipe's name),
    runtime version and last validation."""
    from edgekit.config.fleet import load_fleet
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    from edgekit.fleet.status import fleet_status
    if (app is None) == (recipe is None):
        raise ConfigError("give exactly one of --app or --recipe", key="app")
    name = app or load_recipe(recipe).name
    chosen = load_fleet(fleet).select(limit)
    if on_progress:
        on_progress(f"reading {len(chosen.devices)} device(s)…")
    return FleetStatus(name, fleet_status(chosen, name, concurrency=chosen.rollout.concurrency))


def export_ansible(fleet: Path, recipe: Path, out: Path,
                   limit: str | None = None) -> AnsibleExport:
    """Build the recipe per target profile and write the same rollout as an Ansible play."""
    return write_ansible(fleet, recipe, out, builder(recipe), limit=limit)


def check_outputs(release: Path, outputs: Path) -> ValidationReport:
    """A device's outputs (the exported playbook's tar, or a directory) against every golden
    sample of a release; `report.ok` is False when they differ."""
    from edgekit.fleet.outputs_check import check_outputs as run_check
    return run_check(release, outputs)


def _reported(result: FleetResult, html: Path | None) -> FleetResult:
    if html:
        from edgekit.report.fleet_html import write_fleet_report
        write_fleet_report(result, html)
    return result


__all__ = ["FleetStatus", "UpdateOptions", "check_outputs", "export_ansible", "report",
           "resume", "status", "update"]
