"""Default tolerances by dtype, and the limits one output is compared with. Pure logic.

A float32 module and its reference differ by reassociation and fused ops (atol 1e-4, rtol 1e-3
held on every model edgekit tests); a float16 output carries 11 significant bits, so one
rounding is already ~1e-3 of its value: its defaults scale with its epsilon (8 eps ≈ 7.8e-3).
Integers and bool carry no rounding: exact. The recipe's values always win.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from edgekit.config.recipe import Tolerance, Validation
from edgekit.models.bundle import ReferenceSpread

F32_DEFAULTS = (1e-4, 1e-3, 0.999)                    # atol, rtol, min_cosine
HALF_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
HALF_ULPS = 8          # float16/bfloat16: atol = rtol = 8 eps
NARROW_ULPS = 2        # 8-bit and smaller floats (e4m3, e5m2, …): 2 eps, min_cosine 0.99
INT8_BUILD = (1e-2, 1e-2, 0.9999)  # one int8 step after a requantization rounds the other way
SPREAD_FACTOR = 2  # an int8 output may be twice as far from its reference as the reference
                   # is from itself in another summation order (quantize/spread.py)


@dataclass(frozen=True)
class Limits:
    """What one output is held to: every field decided (recipe value or dtype default)."""

    atol: float
    rtol: float
    min_cosine: float
    top1: str           # auto | always | never
    exact: bool         # integer or bool dtype: values must be equal unless a tolerance is set
    rule: str           # how the defaults were chosen, for reports

    def describe(self) -> str:
        if self.exact and self.atol == 0 and self.rtol == 0:
            return f"exact ({self.rule})"
        return f"atol {self.atol:.3g} rtol {self.rtol:.3g} cosine ≥ {self.min_cosine:g} " \
               f"({self.rule})"


def is_exact(dtype: str) -> bool:
    """Integer and bool dtypes (numpy's and ml_dtypes' int4/uint4 …)."""
    return dtype == "bool" or re.fullmatch(r"u?int\d+", dtype) is not None


def dtype_defaults(dtype: str) -> tuple[float, float, float, str]:
    """(atol, rtol, min_cosine, rule) for a dtype name as numpy (or ml_dtypes) spells it."""
    if is_exact(dtype):
        return 0.0, 0.0, F32_DEFAULTS[2], f"{dtype}: exact"
    if dtype in HALF_EPS:
        tol = HALF_ULPS * HALF_EPS[dtype]
        return tol, tol, F32_DEFAULTS[2], f"{dtype} default: {HALF_ULPS} eps"
    narrow = re.fullmatch(r"float\d+_e\d+m(\d+)\w*", dtype)
    if narrow:   # ml_dtypes' float8/6/4 names: the mantissa bits set the epsilon
        tol = NARROW_ULPS * 2.0 ** -int(narrow.group(1))
        return tol, tol, 0.99, f"{dtype} default: {NARROW_ULPS} eps"
    return (*F32_DEFAULTS, f"{dtype} default")


def limits(tol: Tolerance, dtype: str) -> Limits:
    """The recipe's tolerance for an output of `dtype`, its gaps filled by the dtype's defaults."""
    atol, rtol, min_cosine, rule = dtype_defaults(dtype)
    given = [k for k in ("atol", "rtol", "min_cosine") if getattr(tol, k) is not None]
    if given:
        rule = f"{rule}; recipe: {', '.join(given)}" if len(given) < 3 else "recipe"
    return Limits(atol=atol if tol.atol is None else tol.atol,
                  rtol=rtol if tol.rtol is None else tol.rtol,
                  min_cosine=min_cosine if tol.min_cosine is None else tol.min_cosine,
                  top1=tol.top1 or "auto", exact=is_exact(dtype), rule=rule)


def output_limits(validation: Validation, name: str, dtype: str) -> Limits:
    """The limits of output `name` (of `dtype`) under a bundle's `validation`."""
    return limits(validation.for_output(name, exact=is_exact(dtype)), dtype)


def with_build_defaults(validation: Validation, mode: str | None,
                        spread: tuple[ReferenceSpread, ...] = ()) -> Validation:
    """A quantized build's own defaults for the top-level values the recipe left out (they
    apply to floating-point outputs): int8 allows one int8 step. An `fp16` build needs none:
    its golden outputs come from a reference that rounds the same contraction inputs to
    float16 (quantize/fp16.py), so its float32 outputs keep the float32 rule (measured: max
    abs error 5.4e-6 on the transformer block, 6e-8 on the small CNN, vs atol 1e-4), and
    float16 outputs get the float16 rule by their dtype.

    int8 with the reference's `spread` against itself (quantize/spread.py): an output whose
    reference moves more than one step in another summation order (a deep model) gets twice
    that — min_cosine 1 − 2·(1 − cosine), atol 2·max difference — where the recipe set neither
    the value nor that output's own."""
    if mode != "int8":
        return validation
    atol, rtol, min_cosine = INT8_BUILD
    fill = {k: v for k, v in (("atol", atol), ("rtol", rtol), ("min_cosine", min_cosine))
            if getattr(validation, k) is None}
    widened = dict(validation.outputs)
    for s, wide in spread_limits(spread):
        own = validation.outputs.get(s.output, Tolerance())
        wider = {k: v for k, v in wide.items()
                 if getattr(validation, k) is None and getattr(own, k) is None}
        if wider:
            widened[s.output] = own.model_copy(update=wider)
    update = {**fill, "outputs": widened} if widened != validation.outputs else fill
    return validation.model_copy(update=update) if update else validation


def spread_limits(spread: tuple[ReferenceSpread, ...]
                  ) -> list[tuple[ReferenceSpread, dict[str, float]]]:
    """The int8 outputs whose reference spread is wider than the int8 defaults, each with the
    limits twice that spread allows (only those looser than the defaults)."""
    atol, _, min_cosine = INT8_BUILD
    found = []
    for s in spread:
        wide = {"min_cosine": max(-1.0, 1 - SPREAD_FACTOR * (1 - s.cosine)),
                "atol": SPREAD_FACTOR * s.max_abs_error}
        wide = {k: v for k, v in wide.items()
                if (v < min_cosine if k == "min_cosine" else v > atol)}
        if wide:
            found.append((s, wide))
    return found
