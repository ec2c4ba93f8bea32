"""Stage `quantize` for PyTorch models (PT2E): the exported fp32 program → the model the
recipe's `quantize:` asks for.

- int8: contraction inputs quantized (weights int8, activations int8 calibrated per tensor);
- int8-weights: only the weights (no calibration; compute stays float);
- fp16: the graph is unchanged (IREE demotes contraction inputs at compile time); the reference
  is the fp32 graph with contraction inputs rounded to f16.

Golden outputs become the quantized reference's outputs, so validation checks the compiler and
the device, not the quantization error; that error is measured here, against the fp32 model on
held-out samples, and may fail the build (`quantize.min_cosine`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch.utils import _pytree as pytree

from edgekit.config.recipe import LayerError, Recipe
from edgekit.errors import ModelLoadError, QuantizationError
from edgekit.models.bundle import QuantizationNote
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import dynamic_shapes, program_digest
from edgekit.pipeline.quantize.accuracy import accuracy_report, check_floor
from edgekit.pipeline.quantize.samples import as_batches, calibration_samples, held_out_samples

Run = Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]]


def quantized_program(recipe: Recipe, exported: ExportedModel[torch.export.ExportedProgram]
                      ) -> ExportedModel[torch.export.ExportedProgram]:
    quantize = recipe.quantize
    if quantize is None:
        return exported
    fp32 = graph_runner(exported.program.module())
    names = [o.name for o in exported.outputs]
    held_out, source = held_out_samples(recipe, exported.inputs)
    if quantize.mode == "fp16":
        from edgekit.pipeline.quantize.fp16 import Fp16Contractions
        reference = graph_runner(exported.program.module(), Fp16Contractions)
        program, digest = exported.program, exported.digest
        note = QuantizationNote(mode=quantize.mode)
    else:
        weights_only = quantize.mode == "int8-weights"
        calibration = [] if weights_only else calibration_samples(recipe, exported.inputs)
        # weight observers see the weights on any forward pass: one golden sample will do
        observed = calibration or [exported.samples]
        from edgekit.pipeline.quantize.int8 import (float_activation_matmuls, quantize_graph,
                                                    quantized_contractions)
        keep_float = _checked_keep_float(recipe, exported.program.module())
        try:
            graph = quantize_graph(exported.program.module(), as_batches(observed),
                                   per_channel=quantize.weights == "per-channel",
                                   weights_only=weights_only, keep_float=keep_float,
                                   activation_matmuls=quantize.activation_matmuls == "int8")
        except Exception as exc:  # torchao raises many kinds on graphs it cannot annotate
            raise QuantizationError(f"{quantize.mode}: quantizing the graph failed: "
                                    f"{type(exc).__name__}: {exc}", where="stage quantize") \
                from None
        count = quantized_contractions(graph)
        if count == 0:
            raise QuantizationError(f"{quantize.mode}: the model has no convolution, linear or "
                                    "matmul to quantize", where="stage quantize",
                                    hint="drop `quantize:` (nothing would change)")
        float_matmuls = 0 if weights_only else float_activation_matmuls(graph)
        program = _reexport(recipe, graph, exported)
        reference = graph_runner(graph)
        digest = program_digest(program)
        note = QuantizationNote(
            mode=quantize.mode, weights=quantize.weights or "", quantized_ops=count,
            # the layers kept float are float contractions the census is to expect
            allow_float_contractions=quantize.allow_float_contractions or bool(keep_float),
            float_matmuls=float_matmuls,
            calibration=(f"{quantize.calibration} ({len(calibration)} samples)"
                         if calibration else ""),
            float_layers=float_layers(quantize), search=quantize.search)
    report = accuracy_report(fp32, reference, held_out, source, names, recipe.validation)
    check_floor(report, quantize.min_cosine, quantize.mode, where=f"{recipe.path} (quantize)")
    golden = tuple(reference(exported.samples))
    more_golden = tuple(tuple(reference(s)) for s in exported.more_samples)
    if quantize.mode == "int8":   # how far a right module may be: the reference vs itself
        from edgekit.pipeline.quantize.spread import reference_spread
        note = note.model_copy(update={"reference_spread": reference_spread(
            graph, (exported.samples, *exported.more_samples), (golden, *more_golden), names)})
    return dataclasses.replace(
        exported, program=program, digest=digest, golden=golden, more_golden=more_golden,
        quantization=note.model_copy(update={"accuracy": report}))


def _checked_keep_float(recipe: Recipe, graph: torch.fx.GraphModule) -> frozenset[str]:
    """`quantize.keep_float`, each name a module that holds a layer (else one line naming
    the layers there are)."""
    from edgekit.pipeline.quantize.int8 import contraction_layers, module_paths
    names = frozenset(recipe.quantize.keep_float or ())
    if not names:
        return names
    known = {p for node in graph.graph.nodes for p in module_paths(node)} | {""}
    unknown = sorted(names - known)
    if unknown:
        layers = contraction_layers(graph)
        raise QuantizationError(
            f"int8: quantize.keep_float names {', '.join(map(repr, unknown))}, not a module of "
            f"the model", where=f"{recipe.path} (quantize.keep_float)",
            hint="its layers: " + ", ".join(layers[:12]) + (" …" if len(layers) > 12 else ""))
    return names


def float_layers(quantize) -> tuple[LayerError, ...]:
    """The kept layers with their measured error (from the search that chose them), in the
    order the search ranked them; a layer named by hand has no figures."""
    measured = {e.layer: e for e in quantize.search.layers} if quantize.search else {}
    return tuple(measured.get(name, LayerError(layer=name))
                 for name in quantize.keep_float or ())


def _reexport(recipe: Recipe, graph: torch.fx.GraphModule,
              exported: ExportedModel) -> torch.export.ExportedProgram:
    args = tuple(torch.from_numpy(np.array(s)) for s in exported.samples)
    try:
        with warnings.catch_warnings():  # torch's own deprecation chatter about pytree specs
            warnings.simplefilter("ignore", FutureWarning)
            return torch.export.export(graph, args, dynamic_shapes=dynamic_shapes(recipe))
    except Exception as exc:  # torch.export raises many kinds
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"exporting the quantized model failed: {first}",
                             where="stage quantize") from None


def graph_runner(graph: torch.fx.GraphModule, mode=None, channels_last: bool = False) -> Run:
    """The graph as a Run; `mode`: a context to run it in; `channels_last`: its 4-D float
    inputs in that memory format (another summation order for PyTorch's convolutions)."""
    def run(sample: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        args = next(as_batches([sample]))
        if channels_last:
            args = tuple(a.contiguous(memory_format=torch.channels_last)
                         if a.ndim == 4 and a.is_floating_point() else a for a in args)
        with torch.no_grad(), (mode() if mode else contextlib.nullcontext()):
            flat, _ = pytree.tree_flatten(graph(*args))
        return tuple(t.detach().contiguous().numpy() for t in flat
                     if isinstance(t, torch.Tensor))
    return run
