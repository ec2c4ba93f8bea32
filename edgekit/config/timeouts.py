"""How long edgekit waits for a device at each step before it calls the device unreachable.

One frozen record, :class:`Timeouts`. Its values come, lowest first, from the built-in defaults,
a target profile's `timeouts:` section, a recipe's `timeouts:` section, then the environment
(``EDGEKIT_TIMEOUT_CONNECT_S``, ``…_BANNER_S``, ``…_AUTH_S``, ``…_SFTP_S``, ``…_COMMAND_S``), so
an operator can lengthen (or shorten) a deadline for one run without editing a file. A section
sets only the keys it names. Timeouts never change a module's bytes: they are left out of the
profile's fingerprint and of the build cache key.

The defaults: a device answers each SSH step in well under a second on a LAN, an emulated arm64
device (qemu user mode) in a few seconds; an SFTP request is a 32 kB block. A deadline is a
stall detector, not a budget for a whole transfer: an upload may take an hour as long as a
block is acknowledged every `sftp_s` seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pydantic

from edgekit.config.schema_base import Frozen
from edgekit.errors import ConfigError

ENV_PREFIX = "EDGEKIT_TIMEOUT_"


class Timeouts(Frozen):
    """Deadlines in seconds, one per step of talking to a device."""

    connect_s: float = pydantic.Field(
        default=10, gt=0, description="TCP connect to the device's SSH port")
    banner_s: float = pydantic.Field(
        default=15, gt=0, description="the SSH banner after connecting (a port that does not "
                                      "speak SSH fails after this long, without retries)")
    auth_s: float = pydantic.Field(
        default=20, gt=0, description="key exchange, then authentication, each")
    sftp_s: float = pydantic.Field(
        default=60, gt=0, description="one file operation (or one block of an upload or "
                                      "download) without an answer: the device stalled")
    command_s: float = pydantic.Field(
        default=300, gt=0, description="a remote command that sets no deadline of its own "
                                       "(hooks, validation and benchmarks set theirs)")

    def over(self, layer: "Timeouts | None") -> "Timeouts":
        """These values with the keys `layer` sets (explicitly) put over them."""
        if layer is None:
            return self
        return self.model_copy(update={k: getattr(layer, k) for k in layer.model_fields_set})

    def with_env(self, environ: Mapping[str, str] | None = None) -> "Timeouts":
        """These values with the `EDGEKIT_TIMEOUT_<KEY>` variables that are set put over them;
        a value that is not a positive number of seconds is a ConfigError naming the
        variable."""
        environ = os.environ if environ is None else environ
        update: dict[str, float] = {}
        for key in type(self).model_fields:
            name = ENV_PREFIX + key.upper()
            raw = environ.get(name)
            if raw is None or raw == "":
                continue
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not value > 0 or value == float("inf"):
                raise ConfigError(f"must be a number of seconds > 0 (got {raw!r})", key=name,
                                  hint=f"e.g. {name}=30")
            update[key] = value
        return self.model_copy(update=update)


def resolve_timeouts(*layers: Timeouts | None,
                     environ: Mapping[str, str] | None = None) -> Timeouts:
    """Defaults, then each layer in order (e.g. profile, then recipe), then the environment."""
    timeouts = Timeouts()
    for layer in layers:
        timeouts = timeouts.over(layer)
    return timeouts.with_env(environ)


__all__ = ["ENV_PREFIX", "Timeouts", "resolve_timeouts"]
