"""Numbers and words a device sends back, parsed strictly (the device is not trusted).

A figure is an ASCII number within the range it can have, finite; anything else is "not said"
(None), never a crash, an overflow or an infinite latency that breaks every later view.
"""

from __future__ import annotations

import math

_DIGITS = {10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def ascii_int(value: str, limit: int, base: int = 10) -> int | None:
    """`value` as an integer in [0, limit] written in ASCII digits (hex may start 0x), else
    None. (str.isdigit would take '²', which int() refuses.)"""
    value = value.strip()
    if base == 16 and value[:2].lower() == "0x":
        value = value[2:]
    if not value or len(value) > 24 or not set(value) <= _DIGITS[base]:
        return None
    number = int(value, base)
    return number if number <= limit else None


def finite_float(value: object, low: float, high: float) -> float | None:
    """`value` (a number, or its ASCII text) as a finite float in [low, high], else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 40 or not text.isascii():
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and low <= number <= high else None
