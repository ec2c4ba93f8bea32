"""Base class for every config schema: frozen, unknown keys refused."""

from __future__ import annotations

import pydantic


class Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
