"""Validation reports: how a module's outputs compare with the golden reference."""

from __future__ import annotations

from edgekit.config.schema_base import Frozen


class OutputComparison(Frozen):
    name: str
    shape: tuple[int, ...]
    dtype: str = ""                      # the golden output's
    limits: str = ""                     # what it was held to (atol, rtol, cosine; the rule)
    max_abs_error: float
    max_rel_error: float
    cosine: float | None = None          # None: undefined (a side all zero) or not computed
    top1_agreement: float | None = None  # fraction of rows whose arg-max matches; None: n/a
    # max_abs_error / eager float32's own against the float64 goldens (`validation.reference:
    # float64`): 1 is as exact as PyTorch in float32; None: no float64 reference
    float32_ratio: float | None = None
    ok: bool
    problems: tuple[str, ...] = ()


class ValidationReport(Frozen):
    app: str
    target: str
    where: str  # "host" or a device name
    ok: bool
    outputs: tuple[OutputComparison, ...]
    seconds: float
    samples: int = 1   # validation samples run; `outputs` holds each output's worst
