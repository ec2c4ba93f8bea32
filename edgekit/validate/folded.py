"""Inputs built into the module as constants (manifest `folded_inputs`), held against every
sample that reaches the module later. Pure numpy.

A shape or axes input folded from the recipe's samples is read by the module as that constant:
whatever a later sample passes for it is ignored, so a sample with another value would be
"validated" against outputs computed for a value the module never sees. Such a sample is
refused in one line (input, folded value, given value) before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from edgekit.errors import BundleError
from edgekit.models.bundle import Bundle, FoldedInput, TensorSig


def folded_input(name: str, value: np.ndarray) -> FoldedInput:
    """The manifest's record of one folded input's value."""
    array = np.asarray(value)
    return FoldedInput(name=name, dtype=str(array.dtype), shape=tuple(array.shape),
                       values=tuple(array.ravel().tolist()))


def folded_value(folded: FoldedInput) -> np.ndarray:
    return np.asarray(folded.values, dtype=folded.dtype).reshape(folded.shape)


def _shown(array: np.ndarray) -> str:
    text = str(np.asarray(array).tolist())
    return text if len(text) <= 40 else text[:39] + "…"


def disagreement(folded: Sequence[FoldedInput], inputs: Sequence[TensorSig],
                 sample: Sequence[np.ndarray]) -> str | None:
    """Why one input set (in the module's input order) disagrees with a folded input, or
    None. A sample without that input (fewer arrays) is not judged for it."""
    position = {sig.name: i for i, sig in enumerate(inputs)}
    for f in folded:
        i = position.get(f.name)
        if i is None or i >= len(sample):
            continue
        given, built = np.asarray(sample[i]), folded_value(f)
        if given.shape != built.shape or not np.array_equal(given, built):
            return (f"input '{f.name}' is {_shown(given)} here, but the module was built with "
                    f"{_shown(built)} folded in as a constant (it ignores what is passed)")
    return None


def first_disagreement(folded: Sequence[FoldedInput], inputs: Sequence[TensorSig],
                       samples: Iterable[tuple[str, Sequence[np.ndarray]]]
                       ) -> tuple[str, str] | None:
    """(where, why) of the first of the named input sets that disagrees, or None."""
    for where, sample in samples:
        why = disagreement(folded, inputs, sample)
        if why:
            return where, why
    return None


def bundle_disagreement(bundle: Bundle) -> tuple[str, str] | None:
    """(file, why) for the first of a bundle's own input sets (golden, further validation
    samples, the dataset gate's) that disagrees with its folded inputs, or None. Only the
    folded inputs' files are read."""
    m = bundle.manifest
    if not m.folded_inputs:
        return None
    wanted = {i for i, sig in enumerate(m.inputs) if sig.name in {f.name for f in m.folded_inputs}}
    sets = [m.golden_inputs, *(s.inputs for s in m.more_golden)]
    if m.dataset is not None:
        sets += [tuple(m.dataset.sample_files(k)) for k in range(m.dataset.count)]

    def loaded(files: Sequence[str]) -> tuple[str, list]:
        arrays = [np.load(bundle.file(f), allow_pickle=False) if i in wanted else None
                  for i, f in enumerate(files)]
        return files[min(wanted)] if wanted else files[0], arrays

    for files in sets:
        where, arrays = loaded(files)
        why = disagreement(m.folded_inputs, m.inputs,
                           [a if a is not None else np.empty(0) for a in arrays])
        if why:
            return where, why
    return None


def refuse_disagreeing(bundle: Bundle) -> None:
    """BundleError (exit 6) when one of the bundle's input sets disagrees with a folded input:
    before `validate` runs it and before `deploy` uploads it."""
    found = bundle_disagreement(bundle)
    if found is not None:
        where, why = found
        raise BundleError(f"{where}: {why}", where=str(bundle.path),
                          hint="build again with samples of that value (`samples:`), or give "
                               "the input `static: false` where the model allows it")
