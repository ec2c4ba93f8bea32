"""Base class for every config schema (frozen, unknown keys refused) and the JSON store of
edgekit's own state files."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import pydantic


class Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


M = TypeVar("M", bound=pydantic.BaseModel)


def load_model_map(path: Path, model: type[M]) -> dict[str, M]:
    """A JSON object of name → model (edgekit's own state files); empty when absent."""
    if not path.is_file():
        return {}
    return {name: model.model_validate(item) for name, item in json.loads(path.read_text()).items()}


def save_model_map(path: Path, entries: Mapping[str, pydantic.BaseModel]) -> None:
    """Write atomically (temporary file, then rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({n: e.model_dump() for n, e in sorted(entries.items())}, indent=2))
    tmp.replace(path)
