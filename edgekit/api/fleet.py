"""Fleet commands composed with the build: the recipe is built once per target profile in the
fleet (steered like `edgekit build`), then handed to the rollout or the Ansible export."""

from __future__ import annotations

from pathlib import Path

from edgekit.api.build import BuildOptions, build
from edgekit.fleet.ansible_export import AnsibleExport, export_ansible as write_ansible
from edgekit.fleet.rollout import BuildFor, Progress, UpdateOptions, update as run_update
from edgekit.models.fleet import FleetResult


def builder(recipe: Path, use_cache: bool = True) -> BuildFor:
    """target profile → the recipe's bundle for it."""
    return lambda target: build(BuildOptions(recipe=recipe, target=target,
                                             use_cache=use_cache)).bundle


def update(options: UpdateOptions, on_event: Progress | None = None) -> FleetResult:
    """Build the recipe for every target profile in the fleet, then roll it out in waves."""
    return run_update(options, builder(options.recipe, options.use_cache), on_event)


def export_ansible(fleet: Path, recipe: Path, out: Path,
                   limit: str | None = None) -> AnsibleExport:
    """Build the recipe per target profile and write the same rollout as an Ansible play."""
    return write_ansible(fleet, recipe, out, builder(recipe), limit=limit)


__all__ = ["UpdateOptions", "export_ansible", "update"]
