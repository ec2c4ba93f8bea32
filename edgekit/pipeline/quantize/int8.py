"""Our own PT2E quantizer: which edges of the exported graph get int8 observers.

PyTorch's XNNPACK-style quantizer now lives under `torchao.testing` and is deprecated, so edgekit
annotates the graph itself with torchao's stable PT2E API (`prepare_pt2e` / `convert_pt2e`).
What gets quantized is exactly the inputs of contractions (convolutions, linear layers,
matmuls): weights symmetric int8 (per channel by default), activations affine int8 per tensor.
Outputs stay float, so every contraction reads int8 and the rest of the graph is unchanged;
IREE's global optimization turns dequantize → contraction into int8×int8→int32 arithmetic.

A matmul of two computed operands (attention's scores q·kᵀ and context attn·v) stays float
unless the recipe says `quantize.activation_matmuls: int8`: int8 there quantizes BOTH operands
on every call (a dispatch each, plus IREE's zero-point row/column sums and per-operand encode
dispatches) and has no weight whose bytes int8 would save, so it pays only where its MACs
dwarf those steps. Transformer block (EncoderLayer(64, 4, 128), 16 tokens; host, local-sync,
fastest calls): the two 4×16×16×16 matmuls int8 cost 0.42 + 0.31 µs plus 3 quantize, 4
encode and 2 zero-point-sum dispatches (~1 µs more, 9 more dispatches); float 0.21 + 0.33 µs.
Whole block, 1 thread (bench/quantization_flags.py): int8 with them int8 vs float — see that
docstring. The manifest counts them (`quantization.float_matmuls`); the contraction check
expects exactly those float (pipeline/lower.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

import torch

aten = torch.ops.aten

# (op, index of the activation input, index of the weight input or None for two activations)
# (the `.padding` forms, string padding, are rewritten to `.default` before annotating:
# conv_padding.py; listed so the layers of an unrewritten graph are counted too)
_CONTRACTIONS = {
    aten.conv1d.default: (0, 1), aten.conv2d.default: (0, 1), aten.conv3d.default: (0, 1),
    aten.conv1d.padding: (0, 1), aten.conv2d.padding: (0, 1), aten.conv3d.padding: (0, 1),
    aten.linear.default: (0, 1),
    aten.matmul.default: (0, None), aten.bmm.default: (0, None), aten.mm.default: (0, None),
}


@contextlib.contextmanager
def _quiet_torchao():
    """torchao logs warnings about optional GPU kernels it cannot load on import."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _specs(per_channel: bool):
    from torchao.quantization.pt2e.observer import (HistogramObserver, MinMaxObserver,
                                                     PerChannelMinMaxObserver)
    from torchao.quantization.pt2e.quantizer import QuantizationSpec
    activation = QuantizationSpec(
        dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_affine,
        observer_or_fake_quant_ctr=HistogramObserver.with_args(eps=2 ** -12))
    qscheme = torch.per_channel_symmetric if per_channel else torch.per_tensor_symmetric
    observer = PerChannelMinMaxObserver if per_channel else MinMaxObserver
    # -127..127: a symmetric range keeps zero exactly representable and -w == -(w)
    weight = QuantizationSpec(
        dtype=torch.int8, quant_min=-127, quant_max=127, qscheme=qscheme, ch_axis=0,
        observer_or_fake_quant_ctr=observer.with_args(eps=2 ** -12, qscheme=qscheme))
    return activation, weight


def module_paths(node: torch.fx.Node) -> list[str]:
    """The module paths a node was computed inside, outermost first (the root "" left out)."""
    return [path for path, _ in (node.meta.get("nn_module_stack") or {}).values() if path]


def contraction_layers(graph: torch.fx.GraphModule) -> list[str]:
    """The layers the quantizer can keep float, in execution order: the innermost module of
    each contraction (a convolution, linear or matmul); "" for one in the model's own forward."""
    layers: list[str] = []
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target in _CONTRACTIONS:
            paths = module_paths(node)
            layer = paths[-1] if paths else ""
            if layer not in layers:
                layers.append(layer)
    return layers


def _kept_float(node: torch.fx.Node, keep_float: frozenset[str]) -> bool:
    """Inside a module `keep_float` names (per-module exclusion, as XNNPACKQuantizer's
    `set_module_name(name, None)`; a block covers every layer in it)."""
    return bool(keep_float) and (any(p in keep_float for p in module_paths(node))
                                 or ("" in keep_float and not module_paths(node)))


def _quantizer(per_channel: bool, weights_only: bool, keep_float: frozenset[str] = frozenset(),
               activation_matmuls: bool = False):
    from torchao.quantization.pt2e.quantizer import QuantizationAnnotation, Quantizer
    activation, weight = _specs(per_channel)

    class ContractionInputsQuantizer(Quantizer):
        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            for node in model.graph.nodes:
                roles = _CONTRACTIONS.get(node.target) if node.op == "call_function" else None
                if roles is None or _kept_float(node, keep_float):
                    continue
                act_index, weight_index = roles
                specs = {}
                if weight_index is not None and _is_constant(node.args[weight_index]):
                    specs[node.args[weight_index]] = weight
                    if not weights_only:
                        specs[node.args[act_index]] = activation
                elif not weights_only and (activation_matmuls or _has_constant(node)):
                    # activation × activation (attention): only when asked for (module doc)
                    specs = {node.args[0]: activation, node.args[1]: activation}
                if specs:
                    node.meta["quantization_annotation"] = QuantizationAnnotation(
                        input_qspec_map=specs, _annotated=True)
            return model

        def validate(self, model: torch.fx.GraphModule) -> None:
            pass

    return ContractionInputsQuantizer()


def _has_constant(node: torch.fx.Node) -> bool:
    return any(_is_constant(a) for a in node.args[:2])


def _is_constant(node) -> bool:
    """A weight: a parameter/buffer read (`get_attr`) rather than a computed activation."""
    return isinstance(node, torch.fx.Node) and node.op == "get_attr"


def quantize_graph(graph: torch.fx.GraphModule, calibration: Iterable[tuple[torch.Tensor, ...]],
                   per_channel: bool, weights_only: bool,
                   keep_float: frozenset[str] = frozenset(),
                   activation_matmuls: bool = False) -> torch.fx.GraphModule:
    """Annotate (but not the layers inside `keep_float`'s modules), observe the calibration
    batches (none needed for weights only), convert. String-padded convolutions (`padding=
    "same"`) become explicit ones first, in place."""
    from edgekit.pipeline.quantize.conv_padding import explicit_conv_padding
    explicit_conv_padding(graph)
    with _quiet_torchao():
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        prepared = prepare_pt2e(graph, _quantizer(per_channel, weights_only, keep_float,
                                                  activation_matmuls))
        with torch.no_grad():
            for batch in calibration:
                prepared(*batch)
        return convert_pt2e(prepared)


def quantized_contractions(graph: torch.fx.GraphModule) -> int:
    """How many contractions read a dequantized operand (0: the quantizer found nothing)."""
    dequantize = {"dequantize_per_tensor", "dequantize_per_channel"}
    count = 0
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target in _CONTRACTIONS:
            if any(isinstance(a, torch.fx.Node) and a.op == "call_function"
                   and getattr(a.target, "__name__", "").split(".")[0] in dequantize
                   for a in node.args[:2]):
                count += 1
    return count


def float_activation_matmuls(graph: torch.fx.GraphModule) -> int:
    """How many matmuls of two computed operands (no weight) read no dequantized operand: the
    ones `quantize.activation_matmuls: float` left float."""
    count = 0
    for node in graph.graph.nodes:
        roles = _CONTRACTIONS.get(node.target) if node.op == "call_function" else None
        if roles is None or roles[1] is not None:
            continue
        operands = [a for a in node.args[:2] if isinstance(a, torch.fx.Node)]
        if not _has_constant(node) and not any(
                getattr(a.target, "__name__", "").startswith("dequantize_per")
                for a in operands if a.op == "call_function"):
            count += 1
    return count
