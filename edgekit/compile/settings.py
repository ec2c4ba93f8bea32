"""The backend's settings for one compile: options= over edgekit.config over the environment."""

from __future__ import annotations

from typing import Literal

import pydantic

import edgekit.config as config
from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.config.schema_base import Frozen
from edgekit.errors import ConfigError


class CompileSettings(Frozen):
    target: str = "host"
    lowering: Literal["auto", "tosa", "linalg", "torch"] = "auto"
    device: str | None = None
    identity: str | None = None
    flags: tuple[str, ...] = ()

    @pydantic.field_validator("flags")
    @classmethod
    def _edgekit_options_known(cls, flags: tuple[str, ...]) -> tuple[str, ...]:
        parse_edgekit_flags(flags)
        return flags


def resolve_settings(options: dict | None) -> CompileSettings:
    """Merge `options=` over the current edgekit.config attributes; clear errors for unknown
    option names or values, listing the choices."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(config.COMPILE_SETTINGS))
    if unknown:
        raise ConfigError(f"unknown torch.compile option {unknown[0]!r}", key="options",
                          hint=f"expected one of: {', '.join(config.COMPILE_SETTINGS)}")
    merged = {name: getattr(config, name) for name in config.COMPILE_SETTINGS}
    merged.update(options)
    if isinstance(merged["flags"], str):
        merged["flags"] = tuple(merged["flags"].split())
    try:
        return CompileSettings.model_validate(merged)
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(map(str, err["loc"]))
        raise ConfigError(f"{err['msg']} (got {err.get('input')!r})", key=f"options.{key}",
                          hint="set it in options=, edgekit.config or EDGEKIT_"
                               f"{key.upper()}") from None
