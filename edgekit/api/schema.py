"""`edgekit schema`: the JSON Schema of a config file kind (for editors' autocompletion)."""

from __future__ import annotations

KINDS = ("recipe", "fleet")


def schema(kind: str) -> dict:
    from edgekit.config.fleet import fleet_json_schema
    from edgekit.config.recipe import recipe_json_schema
    return recipe_json_schema() if kind == "recipe" else fleet_json_schema()


__all__ = ["KINDS", "schema"]
