"""Stage `export`: what every frontend's export produces — the graph torch-mlir imports (the
frontend's payload), the model's digest, golden inputs and outputs, and their signatures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic

import numpy as np

from edgekit.config.recipe import Recipe
from edgekit.models.bundle import QuantizationNote, TensorSig
from edgekit.pipeline.frontends.base import G, Frontend


@dataclass(frozen=True)
class ExportedFunction(Generic[G]):
    """A further function of the same module (an LLM's `decode` beside its `main` prefill):
    its graph, signature, and validation samples with the outputs the module must give."""

    name: str
    program: G
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    samples: tuple[tuple[np.ndarray, ...], ...]
    golden: tuple[tuple[np.ndarray, ...], ...]
    role: str = ""


@dataclass(frozen=True)
class ExportedModel(Generic[G]):
    frontend: Frontend[G]                  # the only one that looks inside `program`
    program: G                             # what torch-mlir imports (the frontend's graph)
    digest: str                            # sha256 of graph + weights: the model's identity
    samples: tuple[np.ndarray, ...]
    golden: tuple[np.ndarray, ...]         # the original model's outputs on `samples`
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    quantization: QuantizationNote | None = None  # set by the quantize stage
    rewrites: tuple[str, ...] = ()         # graph rewrites applied before lowering (what, how many)
    reference: str = ""                    # what computed `golden` (name and version)
    # further validation samples, distinct from `samples` (one output set each in more_golden):
    # one sample can agree with a wrong module by chance (a constant output, a dead branch)
    more_samples: tuple[tuple[np.ndarray, ...], ...] = ()
    more_golden: tuple[tuple[np.ndarray, ...], ...] = ()
    notes: tuple[str, ...] = ()            # what loading changed about the model (opset upgrade…)
    functions: tuple[ExportedFunction[G], ...] = ()  # more functions of the module (decode)
    # inputs whose sample value the graph reads as a constant (name, value): the manifest's
    # `folded_inputs`, refused in later samples that disagree
    folded: tuple[tuple[str, np.ndarray], ...] = ()
    # per output: eager float32's max abs error against float64 goldens (reference: float64)
    float32_error: tuple[float, ...] = ()
    # iree-compile flags a rewrite's form needs (the int8 u8 form: the inner-tiled data tiling),
    # before the recipe's own
    compile_flags: tuple[str, ...] = ()


def with_signature(frontend: Frontend[G], program: G, digest: str, names: tuple[str, ...],
                   shapes: list, samples: tuple[np.ndarray, ...],
                   golden: tuple[np.ndarray, ...], reference: str = "",
                   notes: tuple[str, ...] = ()) -> ExportedModel[G]:
    """The ExportedModel, with input signatures as declared and outputs as the golden run
    produced them."""
    inputs = tuple(TensorSig(name=name, shape=shape, dtype=str(s.dtype))
                   for name, shape, s in zip(names, shapes, samples))
    outputs = tuple(TensorSig(name=f"output_{i}", shape=g.shape, dtype=str(g.dtype))
                    for i, g in enumerate(golden))
    return ExportedModel(frontend=frontend, program=program, digest=digest,
                         samples=tuple(samples), golden=golden, inputs=inputs, outputs=outputs,
                         reference=reference, notes=notes)


def declared_shape(recipe: Recipe, index: int, sample: np.ndarray) -> tuple[int | str, ...]:
    if index < len(recipe.inputs):
        return recipe.inputs[index].shape
    return sample.shape
