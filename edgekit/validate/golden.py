"""Golden outputs that prove nothing, refused at build time. Pure numpy.

An output whose golden values a wrong module reproduces just as well makes validation pass
vacuously: a classifier with a zero-initialised head (all-zero logits), a softmax over a
constant (uniform), a net whose output does not depend on its input. An output is refused
when, on every validation sample, it is entirely NaN/Inf, all zero, or constant within its own
tolerance (a module returning that one value everywhere would pass), or when, with two or more
distinct samples, it is the same (within tolerance) for all of them. Empty outputs have no
values to get wrong and are not judged. `validation.accept_uninformative` (true, or output
names) accepts it knowingly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edgekit.config.recipe import Validation
from edgekit.errors import ConfigError, UninformativeGolden
from edgekit.validate.tolerance import Limits, output_limits


def _as_numbers(array: np.ndarray, lim: Limits) -> np.ndarray:
    exact = lim.exact and lim.atol == 0 and lim.rtol == 0
    return array if exact and array.dtype.kind in "biu" else array.astype(np.float64)


def _fits_one_value(values: np.ndarray, lim: Limits, axis=None) -> np.ndarray | bool:
    """Whether one value (per position when `axis` is given) is within atol + rtol·|v| of
    every value (along `axis`)."""
    if values.dtype.kind in "biu":
        return np.all(values == (values.flat[0] if axis is None else values[:1]), axis=axis)
    middle = (values.max(axis=axis, keepdims=True) + values.min(axis=axis, keepdims=True)) / 2
    return np.all(np.abs(values - middle) <= lim.atol + lim.rtol * np.abs(values), axis=axis)


def sample_reason(array: np.ndarray, lim: Limits) -> str | None:
    """Why one sample's golden output proves nothing, or None."""
    if array.size == 0:
        return None
    values = _as_numbers(array, lim)
    if values.dtype.kind == "f":
        finite = np.isfinite(values)
        if not finite.any():
            kinds = "NaN" if np.isnan(values).all() else "NaN/Inf"
            return f"all {values.size} values are {kinds}"
        if not finite.all():
            return None       # NaN/Inf where the reference has them: positions are compared
    if not np.any(values):
        zero = "False" if values.dtype.kind == "b" else "0"
        return f"all {values.size} values are {zero}" if values.size > 1 \
            else f"its one value is {zero}"
    if values.size >= 2 and _fits_one_value(values, lim):
        first = values.flat[0]
        if np.all(values == first):
            return f"all {values.size} values are " + \
                (f"{float(first):.6g}" if values.dtype.kind == "f" else str(first.item()))
        return (f"all {values.size} values are within its tolerance ({lim.describe()}) of "
                f"{float((values.max() + values.min()) / 2):.6g}")
    return None


def uninformative_reason(per_sample: Sequence[np.ndarray], lim: Limits,
                         inputs_differ: bool = True) -> str | None:
    """Why an output's golden values (one array per validation sample) prove nothing, or None.
    `inputs_differ`: the samples' inputs are not all the same (else identical outputs are
    expected and say nothing)."""
    reasons = [sample_reason(a, lim) for a in per_sample]
    if reasons and all(reasons):
        return reasons[0] if len(reasons) == 1 else f"{reasons[0]} on every sample"
    shapes = {a.shape for a in per_sample}
    if len(per_sample) >= 2 and inputs_differ and len(shapes) == 1 and per_sample[0].size:
        stacked = _as_numbers(np.stack(per_sample), lim)
        if stacked.dtype.kind != "f" or np.all(np.isfinite(stacked)):
            if np.all(_fits_one_value(stacked, lim, axis=0)):
                return (f"it is the same for all {len(per_sample)} validation samples (within "
                        f"its tolerance): a module that ignores its inputs would pass")
    return None


def check_golden(validation: Validation, names: Sequence[str],
                 golden: Sequence[Sequence[np.ndarray]],
                 inputs: Sequence[Sequence[np.ndarray]] = (), where: str | None = None) -> None:
    """Refuse (UninformativeGolden, exit 8) the first output that proves nothing and the
    recipe does not accept. `golden[s][i]`: output i on validation sample s; `inputs[s]` the
    inputs of sample s. A name in `validation.outputs` or `accept_uninformative` that is no
    output is a ConfigError (a typo would silently change nothing)."""
    _names_exist(validation, names, where)
    inputs_differ = len(inputs) < 2 or any(
        len(other) != len(inputs[0]) or any(
            a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(other, inputs[0]))
        for other in inputs[1:])
    for i, name in enumerate(names):
        if validation.accepts_uninformative(name):
            continue
        per_sample = [outputs[i] for outputs in golden]
        lim = output_limits(validation, name, str(per_sample[0].dtype))
        reason = uninformative_reason(per_sample, lim, inputs_differ)
        if reason:
            raise UninformativeGolden(
                f"golden output '{name}' cannot tell a right module from a wrong one: {reason}",
                output=name, where=where,
                hint=f"check the model computes something on these samples (trained or "
                     f"initialised weights; samples that exercise it), or accept it knowingly "
                     f"with `validation: {{accept_uninformative: [{name}]}}`")


def _names_exist(validation: Validation, names: Sequence[str], where: str | None) -> None:
    accepted = validation.accept_uninformative
    for key, given in (("validation.outputs", tuple(validation.outputs)),
                       ("validation.accept_uninformative",
                        accepted if isinstance(accepted, tuple) else ())):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise ConfigError(f"{', '.join(map(repr, unknown))} is no output of the model",
                              where=where, key=key,
                              hint=f"the outputs are: {', '.join(names)}")
