"""Calibration and held-out samples for quantization: a .npz or a Python callable.

A .npz holds one array per model input (keyed by input name) with the samples stacked on a new
leading axis: `x: (N, 1, 3, 32, 32)` for an input `x` of shape (1, 3, 32, 32). An array of
exactly the input's shape is one sample. A callable ('module:function') returns or yields
samples: a tuple of arrays in input order, a dict keyed by input name, or one array.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from edgekit.config.recipe import InputSpec, Recipe
from edgekit.errors import ModelLoadError
from edgekit.models.bundle import TensorSig

Sample = tuple[np.ndarray, ...]
MAX_SAMPLES = 1000


def calibration_samples(recipe: Recipe, inputs: tuple[TensorSig, ...]) -> list[Sample]:
    quantize = recipe.quantize
    source = quantize.calibration if quantize else None
    if not source:
        raise ModelLoadError("no calibration data", where=str(recipe.path),
                             hint="add `calibration: samples.npz` under `quantize:`")
    return _samples_from(recipe, source, inputs, "calibration")


def held_out_samples(recipe: Recipe, inputs: tuple[TensorSig, ...]) -> tuple[list[Sample], str]:
    """Samples for the accuracy report (never the calibration set) and where they came from."""
    quantize = recipe.quantize
    if quantize and quantize.held_out:
        return _samples_from(recipe, quantize.held_out, inputs, "held_out"), quantize.held_out
    from edgekit.pipeline.load import random_input
    count = quantize.held_out_count if quantize else 8
    rng = np.random.default_rng(recipe.seed + 1_000_003)  # never the golden/calibration draw
    specs = recipe.inputs or tuple(InputSpec(name=s.name, shape=s.shape, dtype=s.dtype)
                                   for s in inputs)
    samples = [tuple(random_input(spec, recipe, rng) for spec in specs) for _ in range(count)]
    return samples, f"{count} random samples from the recipe's input ranges"


def _samples_from(recipe: Recipe, source: str, inputs: tuple[TensorSig, ...],
                  key: str) -> list[Sample]:
    where = f"{recipe.path} (quantize.{key})"
    if source.endswith(".npz"):
        samples = _from_npz(recipe, source, inputs, where, key)
    else:
        from edgekit.pipeline.load import import_callable
        produce = import_callable(recipe, source, f"quantize.{key}")
        try:
            produced = produce()
            samples = [_as_sample(item, inputs, where)
                       for item, _ in zip(produced, range(MAX_SAMPLES))]
        except ModelLoadError:
            raise
        except Exception as exc:  # user code: report it, no traceback
            raise ModelLoadError(f"'{source}' raised {type(exc).__name__}: {exc}",
                                 where=where) from None
    if not samples:
        raise ModelLoadError(f"'{source}' gave no samples", where=where)
    for sample in samples:
        _check(sample, inputs, where)
    return samples


def _from_npz(recipe: Recipe, source: str, inputs: tuple[TensorSig, ...], where: str,
              key: str):
    from edgekit.pipeline.load import read_npz
    path = recipe.resolve(source)
    data = read_npz(path, f"quantize.{key}")
    missing = [s.name for s in inputs if s.name not in data]
    if missing:
        raise ModelLoadError(f"{path.name} lacks inputs {missing} (has {list(data)})",
                             where=where, hint="one array per model input, keyed by name")
    arrays = [data[s.name] for s in inputs]
    stacked = [a if a.ndim == len(s.shape) + 1 else a[None] for a, s in zip(arrays, inputs)]
    counts = {a.shape[0] for a in stacked}
    if len(counts) != 1:
        raise ModelLoadError(f"{path.name}: inputs hold different sample counts {sorted(counts)}",
                             where=where)
    count = min(counts.pop(), MAX_SAMPLES)
    return [tuple(np.ascontiguousarray(a[i]) for a in stacked) for i in range(count)]


def _as_sample(item, inputs: tuple[TensorSig, ...], where: str) -> Sample:
    if isinstance(item, dict):
        missing = [s.name for s in inputs if s.name not in item]
        if missing:
            raise ModelLoadError(f"a sample lacks inputs {missing}", where=where)
        item = tuple(item[s.name] for s in inputs)
    elif not isinstance(item, (tuple, list)):
        item = (item,)
    return tuple(np.ascontiguousarray(_to_numpy(a)) for a in item)


def _to_numpy(value) -> np.ndarray:
    detach = getattr(value, "detach", None)
    return detach().cpu().numpy() if detach else np.asarray(value)


def _check(sample: Sample, inputs: tuple[TensorSig, ...], where: str) -> None:
    if len(sample) != len(inputs):
        raise ModelLoadError(f"a sample has {len(sample)} arrays, the model takes "
                             f"{len(inputs)} inputs", where=where)
    for array, sig in zip(sample, inputs):
        fits = array.ndim == len(sig.shape) and all(
            isinstance(d, str) or d == n for d, n in zip(sig.shape, array.shape))
        if not fits or str(array.dtype) != sig.dtype:
            raise ModelLoadError(f"sample input '{sig.name}' is {array.dtype}{list(array.shape)}, "
                                 f"the model takes {sig.dtype}{list(sig.shape)}", where=where)


def as_batches(samples: Iterable[Sample]):
    """Samples as torch tensors, ready to call a graph with."""
    import torch
    for sample in samples:
        yield tuple(torch.from_numpy(np.array(a)) for a in sample)
