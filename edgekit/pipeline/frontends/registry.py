"""The frontends by source kind: an explicit table, chosen once from the recipe's `model:`."""

from __future__ import annotations

from edgekit.config.recipe import ModelSource
from edgekit.errors import ConfigError
from edgekit.pipeline.frontends.base import Frontend
from edgekit.pipeline.frontends.onnx import OnnxFrontend
from edgekit.pipeline.frontends.torch import TorchFrontend

FRONTENDS: dict[str, Frontend] = {f.kind: f for f in (TorchFrontend(), OnnxFrontend())}


def frontend_named(kind: str) -> Frontend:
    try:
        return FRONTENDS[kind]
    except KeyError:
        raise ConfigError(f"no frontend for {kind!r} models",
                          hint=f"expected one of: {', '.join(FRONTENDS)}") from None


def frontend_for(source: ModelSource) -> Frontend:
    """The frontend that reads the one field the recipe's `model:` sets (`python`, `exported`,
    `onnx`)."""
    given = [name for name in type(source).model_fields if getattr(source, name)]
    found = [f for f in FRONTENDS.values() if set(given) & set(f.sources)]
    if len(found) != 1:
        known = sorted(s for f in FRONTENDS.values() for s in f.sources)
        raise ConfigError(f"no frontend reads `model: {{{', '.join(given)}}}`", key="model",
                          hint=f"give exactly one of: {', '.join(known)}")
    return found[0]
