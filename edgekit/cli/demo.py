"""`edgekit demo`: a lab device started, an example deployed and validated on it, stopped."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.cli import complete, render
from edgekit.cli.common import JSON, examples, handle_errors


@click.command(epilog=examples(
    "edgekit demo",
    "edgekit demo --arch aarch64"))
@click.option("--recipe", type=click.Path(path_type=Path),
              help="recipe YAML [default: the MobileNetV2-like example]",
              shell_complete=complete.recipes)
@click.option("--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64",
              show_default=True, help="the lab device to start (aarch64: a Pi under qemu)")
@click.option("--target", help="target profile [default: host for x86_64, rpi4 for aarch64]",
              shell_complete=complete.targets)
@JSON
@handle_errors
def demo(recipe: Path | None, arch: str, target: str | None, as_json: bool) -> None:
    """Start a lab device, deploy an example to it, validate on it, report, stop it."""
    from edgekit.api.demo import DEFAULT_RECIPE, run_demo
    from edgekit.errors import ValidationFailed
    try:
        with render.steps("starting…") as status:
            result = run_demo(recipe or DEFAULT_RECIPE, arch, target, on_stage=status.update)
    except ValidationFailed as exc:
        if not as_json:        # under --json the report is in the error's document
            render.validation_table(exc.report)
        raise
    if as_json:
        render.emit_json({**render.deploy_json(result.deploy), "stopped": True})
        return
    render.deploy_summary(result.deploy)
    render.out.print(f"stopped {result.device}")
