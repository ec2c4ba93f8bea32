"""How far an int8 reference is from itself: the floor a right module's error cannot go below.

An int8 model's golden outputs come from PyTorch running the quantized graph (fake quantization
in float32). Any other summation order — IREE's integer sums, or PyTorch's own convolutions
without oneDNN — lands some values on the other side of a requantization's rounding boundary,
and a deep model carries those one-step differences through every later layer. MobileNetV2-like
(53 int8 layers, random weights): the reference against itself cosine 0.99866 without oneDNN,
0.99932 on channels-last images; the IREE module 0.99932 — a fixed cosine ≥ 0.9999 refused a
module as close to the reference as the reference is to itself. A small CNN: 1.0.

So the build runs the reference in those other orders on the golden samples and records, per
float output, the worst cosine and absolute difference (QuantizationNote.reference_spread); the
int8 defaults are widened to twice that where it exceeds them (validate/tolerance.py).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from edgekit.models.bundle import ReferenceSpread
from edgekit.validate.compare import cosine

Sample = tuple[np.ndarray, ...]
Run = Callable[[Sample], tuple[np.ndarray, ...]]


def reference_spread(graph: torch.fx.GraphModule, samples: Sequence[Sample],
                     golden: Sequence[Sample], names: Sequence[str]
                     ) -> tuple[ReferenceSpread, ...]:
    """Per float output: the worst cosine and max abs difference between `golden` (the graph's
    own outputs on `samples`) and the graph run in other summation orders."""
    worst: dict[int, tuple[float, float]] = {}
    tried: list[str] = []
    for how, run in _other_orders(graph, samples[0]):
        tried.append(how)
        for sample, expected in zip(samples, golden):
            for k, (got, want) in enumerate(zip(run(sample), expected)):
                if not np.issubdtype(want.dtype, np.floating) or got.shape != want.shape:
                    continue
                got64, want64 = got.astype(np.float64), want.astype(np.float64)
                finite = np.isfinite(got64) & np.isfinite(want64)
                cos = cosine(got64, want64)
                if cos is None or not finite.any():
                    continue
                diff = float(np.max(np.abs(got64[finite] - want64[finite])))
                c, d = worst.get(k, (1.0, 0.0))
                worst[k] = (min(c, cos), max(d, diff))
    runs = ", ".join(tried)
    return tuple(ReferenceSpread(output=names[k], cosine=c, max_abs_error=d, runs=runs)
                 for k, (c, d) in sorted(worst.items()) if k < len(names))


def _other_orders(graph: torch.fx.GraphModule, first: Sample) -> Iterator[tuple[str, Run]]:
    from edgekit.pipeline.quantize.pt2e import graph_runner
    yield "convolutions without oneDNN", graph_runner(graph, _without_onednn)
    if any(np.asarray(a).ndim == 4 and np.issubdtype(np.asarray(a).dtype, np.floating)
           for a in first):
        yield "channels-last images", graph_runner(graph, channels_last=True)


@contextlib.contextmanager
def _without_onednn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # oneDNN's flags warn about Intel GPUs' TF32
        with torch.backends.mkldnn.flags(enabled=False):
            yield
