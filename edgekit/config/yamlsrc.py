"""Safe YAML loading that remembers where every key came from.

Schema errors must point at `file:line` and the key, so we compose the YAML node tree
(`yaml.SafeLoader` only) and keep a map from key path to line before handing plain data to
pydantic. Pydantic's error locations are then translated back to lines here, in one place.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from edgekit.errors import ConfigError

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class YamlDoc:
    """Plain data from a YAML file plus the `file:line` of every key path in it (a merged
    document, e.g. a target profile with `extends:`, keeps each key's own file)."""

    path: Path
    data: Any
    lines: dict[Loc, str]

    def where(self, loc: Loc) -> str:
        """`file:line` of the deepest known prefix of `loc` (the document start if none)."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return f"{self.path}:1"


def load_yaml(path: Path) -> YamlDoc:
    """Read `path` with the safe loader; syntax errors and duplicate keys become ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file: {exc}", where=str(path)) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ConfigError(f"invalid YAML: {exc.problem or exc}", where=f"{path}:{line}") from None
    if node is None:
        return YamlDoc(path, {}, {(): f"{path}:1"})
    lines: dict[Loc, str] = {}
    _index(node, (), lines, path)
    data = yaml.safe_load(text)
    return YamlDoc(path, data, lines)


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, str], path: Path) -> None:
    lines.setdefault(loc, f"{path}:{node.start_mark.line + 1}")
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise ConfigError("duplicate key", where=f"{path}:{key_node.start_mark.line + 1}",
                                  key=".".join(map(str, loc + (key,))))
            seen.add(key)
            lines[loc + (key,)] = f"{path}:{key_node.start_mark.line + 1}"
            _index(value_node, loc + (key,), lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, loc + (i,), lines, path)


def validate(doc: YamlDoc, model: type[M], data: Any = None, context: dict | None = None) -> M:
    """Validate `data` (default: the document's) against `model`; the first error becomes a
    one-line ConfigError naming file:line, the key and what was expected."""
    try:
        return model.model_validate(doc.data if data is None else data, context=context)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        raise _to_config_error(doc, model, first, len(errors) - 1) from None


def _to_config_error(doc: YamlDoc, model: type[pydantic.BaseModel], err: dict,
                     more: int) -> ConfigError:
    loc: Loc = tuple(p for p in err["loc"] if not _is_union_tag(p))
    key = ".".join(map(str, loc)) or None
    hint = None
    if err["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        what = "unknown key"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = (f"did you mean '{close[0]}'? " if close else "") + \
            f"expected one of: {', '.join(allowed)}"
    elif err["type"] == "missing":
        what = "required key is missing"
    else:
        what = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], (dict, list)):
            what += f" (got {err['input']!r})"
    if more:
        what += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(what, where=doc.where(loc), key=key, hint=hint)


def _is_union_tag(part: str | int) -> bool:
    # pydantic inserts the chosen union member's type name into locations, e.g. 'list[str]'
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float"})


def _fields_at(model: type[pydantic.BaseModel], loc: Loc) -> list[str]:
    """Names accepted at `loc` below `model`, following nested models through lists and
    optionals, so an unknown-key error can list the choices."""
    current: Any = model
    for part in loc:
        current = _unwrap(current, skip_containers=isinstance(part, int))
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, pydantic.BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = field.annotation
    current = _unwrap(current, skip_containers=False)
    if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return []


def _unwrap(tp: Any, *, skip_containers: bool) -> Any:
    while True:
        origin = typing.get_origin(tp)
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if origin in (typing.Union, types.UnionType) and args:
            models = [a for a in args if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
            tp = models[0] if models else args[0]
        elif skip_containers and origin in (list, tuple, dict) and args:
            tp = args[-1]
            skip_containers = False
        else:
            return tp
