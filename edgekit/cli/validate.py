"""`edgekit validate`: a bundle's golden inputs run here and compared with its outputs."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.cli import render
from edgekit.cli.common import JSON, WIDE, examples, handle_errors


@click.command(epilog=examples(
    "edgekit validate build/kws-mlp-host",
    "edgekit validate build/kws-mlp-host.tar --json"))
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--local", is_flag=True,
              help="run on this machine: the only mode, accepted for old scripts (device "
                   "validation comes with `edgekit deploy`)")
@JSON
@WIDE
@handle_errors
def validate(bundle: Path, local: bool, as_json: bool) -> None:
    """Run a bundle's golden inputs and compare with its golden outputs."""
    from edgekit.api.validate import validate as run_validate
    from edgekit.errors import ValidationFailed
    report = run_validate(bundle)
    if as_json:
        render.emit_json(report.model_dump(mode="json"))
    else:
        render.validation_table(report)
    if not report.ok:
        raise ValidationFailed("outputs differ from the golden reference beyond the bundle's "
                               "tolerances", report=report)
