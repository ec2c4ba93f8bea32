"""`edgekit targets …`: list and inspect target profiles; derive one from a device."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import HOST_HELP, IDENTITY, JSON, WIDE, examples, handle_errors


@click.group()
def targets() -> None:
    """List and inspect target profiles."""


@targets.command("list", epilog=examples(
    "edgekit targets list",
    "edgekit targets list --json"))
@JSON
@WIDE
@handle_errors
def targets_list(as_json: bool) -> None:
    """Every profile found (EDGEKIT_TARGETS_PATH, ./targets, built-in)."""
    from edgekit.api.targets import list_targets
    rows = list_targets()
    if as_json:
        render.emit_json([t.model_dump(mode="json") for t in rows])
        return
    # names, arches and backends stay whole (they are typed back); the description folds
    table = render.fitted_table("", [("name", "key"), ("arch", "key"), ("backend", "key"),
                                     ("cpu / gpu", "short"), ("description", "text")])
    if not render.wide:
        table.columns[-2].max_width = 14      # one long Vulkan profile name folds
    for t in rows:
        device = t.cpu.cpu if t.cpu else (t.vulkan.target if t.vulkan else "")
        if t.npu:
            device = f"{device} + {t.npu.accelerator}" if device else t.npu.accelerator
        table.add_row(t.name, t.arch, t.backend, device, t.description)
    render.out.print(table)


@targets.command("show", epilog=examples(
    "edgekit targets show rpi4",
    "edgekit targets show targets/my-board.yaml --json"))
@click.argument("name", shell_complete=complete.targets)
@JSON
@handle_errors
def targets_show(name: str, as_json: bool) -> None:
    """A profile after `extends:`, with the iree-compile flags it implies."""
    from edgekit.api.targets import show
    data = show(name)
    if as_json:
        render.emit_json(data)
        return
    import yaml
    render.out.print(yaml.safe_dump(data, sort_keys=False), highlight=False, markup=False)


@targets.command("derive", short_help="Write a target profile for a device from its probe.", help=(
    f"Probe HOST ({HOST_HELP}) and write a profile for it: the CPU and its features, cores, "
    "the Vulkan device's IREE target; each value commented with its source."),
    epilog=examples("edgekit targets derive pi@192.0.2.10 -o targets/my-board.yaml"))
@click.argument("host", shell_complete=complete.devices)
@click.option("-o", "--out", required=True, type=click.Path(path_type=Path),
              help="profile to write, e.g. targets/my-board.yaml (a Vulkan device adds "
                   "<name>-gpu.yaml beside it)")
@IDENTITY
@JSON
@handle_errors
def targets_derive(host: str, out: Path, identity: Path | None, as_json: bool) -> None:
    # (its help is the decorator's: a docstring cannot hold HOST_HELP)
    from edgekit.api.targets import derive
    derived = derive(host, out, identity)
    if as_json:
        render.emit_json({"device": derived.device, "written": [str(p) for p in derived.written]})
        return
    for path in derived.written:
        render.out.print(f"wrote {escape(str(path))}", highlight=False)
