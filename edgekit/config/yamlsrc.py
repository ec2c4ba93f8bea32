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


# Plain data only: the tags the safe loader constructs. Any other (`!!python/object`, `!foo`)
# is refused with its line before anything is constructed.
_PLAIN_TAGS = frozenset(tag for tag in yaml.SafeLoader.yaml_constructors if tag)
# Key paths a document may expand to: aliases share nodes, so a few lines of anchors can stand
# for billions of them ("billion laughs"); real recipes and fleets have a few hundred.
MAX_NODES = 100_000


def load_yaml(path: Path) -> YamlDoc:
    """Read `path` with the safe loader; syntax errors, duplicate keys, tags other than plain
    YAML data and documents too deep or too large become a one-line ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file not found", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file: {exc}", where=str(path)) from None
    fast = _compose_fast(text)
    try:
        node = fast[0] if fast else yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(path, exc) from None
    except yaml.YAMLError as exc:  # e.g. a control character (ReaderError)
        raise ConfigError(f"invalid YAML: {_one_line(str(exc))}", where=f"{path}:1") from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", where=f"{path}:1") from None
    if node is None:
        return YamlDoc(path, {}, {(): f"{path}:1"})
    lines: dict[Loc, str] = {}
    try:
        _index(node, (), lines, path)
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", where=f"{path}:1") from None
    try:
        data = yaml.load(text, Loader=_FAST) if fast else yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        raise _yaml_error(path, exc) from None
    except Exception as exc:  # noqa: BLE001 — PyYAML's constructors raise what they meet
        # a value its (plain) tag cannot construct: `!!int abc` (ValueError), a 5000-digit
        # integer (ValueError), `!!timestamp 2026-13-45` (AttributeError), …
        raise ConfigError(f"invalid YAML value: {_one_line(str(exc)) or type(exc).__name__}",
                          where=f"{path}:1") from None
    return YamlDoc(path, data, lines)


# libyaml's parser (PyYAML's CSafeLoader: same resolvers and constructors, C scanner and
# parser) reads a 10,000-device fleet file in a fraction of the pure-Python reader's ~20 s. A
# document it refuses is read again by the pure reader, whose messages the errors quote.
_FAST = getattr(yaml, "CSafeLoader", None)


def _compose_fast(text: str) -> tuple[yaml.Node | None] | None:
    if _FAST is None or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None      # libyaml lets some characters through that the pure reader refuses
    try:
        return (yaml.compose(text, Loader=_FAST),)
    except Exception:  # noqa: BLE001 — the pure reader says what is wrong, in its words
        return None


def _yaml_error(path: Path, exc: yaml.MarkedYAMLError) -> ConfigError:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else 1
    return ConfigError(f"invalid YAML: {_one_line(exc.problem or str(exc))}",
                       where=f"{path}:{line}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _show(tag: str) -> str:
    return tag.replace("tag:yaml.org,2002:", "!!")


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, str], path: Path) -> None:
    line = node.start_mark.line + 1
    if node.tag not in _PLAIN_TAGS:
        raise ConfigError(f"YAML tag '{_show(node.tag)}' is not allowed (only plain data: "
                          "mappings, lists, strings, numbers, booleans, null)",
                          where=f"{path}:{line}", key=_key_text(loc))
    if len(lines) > MAX_NODES:
        raise ConfigError(f"the document expands to more than {MAX_NODES} values (YAML "
                          "aliases?)", where=f"{path}:{line}")
    lines.setdefault(loc, f"{path}:{line}")
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError("a key must be a plain value, not a list or mapping",
                                  where=f"{path}:{key_node.start_mark.line + 1}",
                                  key=_key_text(loc))
            if key_node.tag not in _PLAIN_TAGS:
                raise ConfigError(f"YAML tag '{_show(key_node.tag)}' is not allowed",
                                  where=f"{path}:{key_node.start_mark.line + 1}",
                                  key=_key_text(loc))
            key = key_node.value
            if key in seen:
                raise ConfigError("duplicate key", where=f"{path}:{key_node.start_mark.line + 1}",
                                  key=_key_text(loc + (key,)))
            seen.add(key)
            lines[loc + (key,)] = f"{path}:{key_node.start_mark.line + 1}"
            _index(value_node, loc + (key,), lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, loc + (i,), lines, path)


def _key_text(loc: Loc) -> str | None:
    """A key path for a message, dotted (ConfigError escapes its control characters)."""
    return ".".join(map(str, loc)) or None


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
    key = _key_text(loc)
    hint = None
    if err["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1])
        what = "unknown key"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if loc else []
        hint = (f"did you mean '{close[0]}'? " if close else "") + \
            f"expected one of: {', '.join(allowed)}"
    elif err["type"] == "missing":
        what = "required key is missing"
    else:
        what = _one_line(err["msg"].removeprefix("Value error, "))
        if "input" in err and not isinstance(err["input"], (dict, list)):
            what += f" (got {_short_repr(err['input'])})"
    if more:
        what += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ConfigError(what, where=doc.where(loc), key=key, hint=hint)


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:60] + f"… ({len(text)} characters)"


def _is_union_tag(part: str | int) -> bool:
    # pydantic inserts the chosen union member's type name into locations, e.g. 'list[str]'
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float"})


def _fields_at(model: type[pydantic.BaseModel], loc: Loc) -> list[str]:
    """Names accepted at `loc` below `model`, following nested models through lists and
    optionals, so an unknown-key error can list the choices."""
    current: Any = model
    for part in loc:
        # a list item's index, or a key of a mapping of models (fleet.yaml's `devices: {name:
        # …}`), steps into the item type
        keyed = typing.get_origin(_unwrap(current, skip_containers=False)) is dict
        current = _unwrap(current, skip_containers=isinstance(part, int) or keyed)
        if isinstance(part, int) or keyed:
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
