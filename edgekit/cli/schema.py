"""`edgekit schema KIND`: the JSON Schema of a config file kind."""

from __future__ import annotations

import click

from edgekit.cli import render
from edgekit.cli.common import JSON, examples, handle_errors


@click.command(epilog=examples(
    "edgekit schema recipe > recipe.schema.json",
    "edgekit schema fleet"))
@click.argument("kind", type=click.Choice(["recipe", "fleet"]))
@JSON
@handle_errors
def schema(kind: str, as_json: bool) -> None:
    """Print the JSON Schema of a config file kind (for editor autocompletion)."""
    from edgekit.api.schema import schema as json_schema
    # the schema is JSON either way: --json is accepted like on every command
    render.emit_json(json_schema(kind))
