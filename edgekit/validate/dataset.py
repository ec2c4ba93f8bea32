"""The dataset gate's rules: reading a labelled set, scoring outputs against labels, and the
verdict against the reference score. Pure numpy (a custom metric is the user's callable).

Metrics (the model's first output is scored):
- top1 / top5: the fraction of samples whose label is the arg-max / among the 5 largest of the
  output's last axis (higher is better);
- mse: mean squared error against the labels (target outputs; lower is better);
- cosine: mean cosine similarity per sample against the labels (higher is better);
- 'module:function': called as function(outputs, labels) -> float, higher is better; `outputs`
  is a list (per sample) of tuples of arrays (per output).
The drop is reference - measured (measured - reference for mse); refused when > max_drop.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgekit.errors import ConfigError

BUILTIN = ("top1", "top5", "mse", "cosine")
MAX_SAMPLES = 100_000


def load_set(samples: Path, labels: Path, inputs: int, limit: int | None = None,
             where: str | None = None) -> tuple[list[tuple[np.ndarray, ...]], np.ndarray]:
    """(per-sample input tuples, labels) from a .npz (a key per input in the recipe's input
    order, or sorted; samples stacked on a new leading axis) or a directory of such .npz files
    (in name order), and a .npy of labels. No pickles."""
    files = sorted(samples.glob("*.npz")) if samples.is_dir() else [samples]
    if not files or not all(f.is_file() for f in files):
        raise ConfigError(f"no dataset samples at {samples}", where=where,
                          key="validation.dataset.samples",
                          hint="a .npz (a key per input) or a directory of .npz files")
    stacks: list[list[np.ndarray]] = [[] for _ in range(inputs)]
    for f in files:
        with np.load(f, allow_pickle=False) as npz:
            keys = list(npz.keys())
            if len(keys) != inputs:
                raise ConfigError(f"{f.name} holds {len(keys)} arrays, the model takes {inputs} "
                                  f"inputs", where=where, key="validation.dataset.samples")
            for j, k in enumerate(keys):
                stacks[j].append(npz[k])
    arrays = [np.concatenate(s) for s in stacks]
    count = len(arrays[0])
    if any(len(a) != count for a in arrays):
        raise ConfigError("the dataset's inputs hold different numbers of samples",
                          where=where, key="validation.dataset.samples")
    target = np.load(labels, allow_pickle=False)
    if len(target) != count:
        raise ConfigError(f"{labels.name} holds {len(target)} labels for {count} samples",
                          where=where, key="validation.dataset.labels")
    n = min(count, limit or count, MAX_SAMPLES)
    return [tuple(a[i] for a in arrays) for i in range(n)], target[:n]


def lower_is_better(metric: str) -> bool:
    return metric == "mse"


def score(metric: str, outputs: Sequence[Sequence[np.ndarray]], labels: np.ndarray) -> float:
    """The set's score under `metric` (see the module docstring)."""
    if metric not in BUILTIN:
        value = _custom(metric)(list(outputs), labels)
        if not isinstance(value, (int, float, np.floating)) or not math.isfinite(float(value)):
            raise ConfigError(f"metric {metric} returned {value!r}, not a finite number",
                              key="validation.dataset.metric")
        return float(value)
    first = np.stack([np.asarray(o[0], dtype=np.float64) for o in outputs])
    if metric in ("top1", "top5"):
        k = 1 if metric == "top1" else 5
        rows = first.reshape(len(first), -1)
        truth = np.asarray(labels).reshape(len(rows), -1)[:, 0].astype(np.int64)
        top = np.argsort(-np.nan_to_num(rows, nan=-np.inf), axis=1, kind="stable")[:, :k]
        return float(np.mean(np.any(top == truth[:, None], axis=1)))
    target = np.asarray(labels, dtype=np.float64).reshape(first.shape)
    if metric == "mse":
        return float(np.mean((first - target) ** 2))
    a, b = first.reshape(len(first), -1), target.reshape(len(first), -1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.where(norms > 0, np.sum(a * b, axis=1) / np.where(norms > 0, norms, 1), 0.0)
    return float(np.mean(cos))


def drop(metric: str, reference: float, measured: float) -> float:
    """How much worse `measured` is than `reference` (negative: better)."""
    return measured - reference if lower_is_better(metric) else reference - measured


def refusal(metric: str, reference: float, measured: float, max_drop: float) -> str | None:
    """The gate's one line when the drop exceeds `max_drop` (a NaN score is refused), else
    None."""
    d = drop(metric, reference, measured)
    if math.isfinite(d) and d <= max_drop:
        return None
    return (f"dataset gate: {metric} reference {reference:.4f}, measured {measured:.4f}, "
            f"drop {d:.4f} > max_drop {max_drop:g}")


def _custom(spec: str):
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"metric {spec}: cannot import it ({exc})",
                          key="validation.dataset.metric",
                          hint="a 'module:function' importable on this host (PYTHONPATH)") \
            from None
    if not callable(fn):
        raise ConfigError(f"metric {spec} is not callable", key="validation.dataset.metric")
    return fn
