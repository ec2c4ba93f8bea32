"""The float model inside a QDQ ONNX model, for the dataset gate's `reference: fp32`: each
QuantizeLinear → DequantizeLinear pair on an activation is taken out (the activation stays
float, unrounded), a weight's DequantizeLinear stays (its int8 rounding is all the file keeps
of the float weights). A pair whose range starts at 0 (zero point = the type's minimum)
becomes a Relu: quantizers fold a Relu into such a pair (onnxruntime removes it), and every
value below 0 saturated to 0 there; a Clip folded the same way keeps its lower bound only.
A QOperator model (QLinearConv, QGemm, MatMulInteger, …) has no such float form: it is
refused here, and `quantize.float_model` or `reference: golden` are the ways out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from edgekit.errors import ConfigError
from edgekit.pipeline.quantize.onnx_qdq import QDQ_OPS, QOPERATOR_OPS

if TYPE_CHECKING:
    import onnx

def _integer(node) -> bool:
    """An op of the QOperator format (integer arithmetic with no float form to fall back on)."""
    return node.op_type.startswith("QLinear") or node.op_type in QOPERATOR_OPS


def is_quantized(model: onnx.ModelProto) -> bool:
    return any(n.op_type in QDQ_OPS or _integer(n) for n in model.graph.node)


def without_qdq(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    """`model` with its activations' Q/DQ pairs removed (see the module doc); a ConfigError
    for a model with integer ops or a QuantizeLinear that does not feed a DequantizeLinear."""
    import onnx
    nodes = list(model.graph.node)
    integer = sorted({n.op_type for n in nodes if _integer(n)})
    if integer:
        raise ConfigError(f"reference fp32 needs the float model, and this "
                          f"ONNX model computes in integers ({', '.join(integer)}: QOperator "
                          "format)", where=where, key="validation.dataset.reference",
                          hint="set `quantize.float_model` to the fp32 .onnx, or use "
                               "`reference: golden`")
    produced = {out: n for n in nodes for out in n.output}
    constants = {t.name: t for t in model.graph.initializer}
    kept = []
    for node in nodes:
        source = produced.get(node.input[0]) if node.op_type == "DequantizeLinear" else None
        if source is not None and source.op_type == "QuantizeLinear":
            op = "Relu" if _starts_at_zero(source, constants) else "Identity"
            kept.append(onnx.helper.make_node(op, [source.input[0]], [node.output[0]],
                                              name=f"{node.name or node.output[0]}_float"))
        else:
            kept.append(node)
    kept = _live(kept, _graph_outputs(model))
    if any(n.op_type == "QuantizeLinear" for n in kept):
        raise ConfigError("reference fp32 needs the float model, and a "
                          "QuantizeLinear of this ONNX model feeds no DequantizeLinear (its "
                          "integers are used as they are)", where=where,
                          key="validation.dataset.reference",
                          hint="set `quantize.float_model` to the fp32 .onnx, or use "
                               "`reference: golden`")
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    del stripped.graph.node[:]
    stripped.graph.node.extend(kept)
    # the scales, zero points and value infos of the removed pairs describe nothing now
    names = {out for n in kept for out in n.output}
    infos = [v for v in stripped.graph.value_info if v.name in names]
    del stripped.graph.value_info[:]
    stripped.graph.value_info.extend(infos)
    read = {i for n in kept for i in n.input} | _graph_outputs(stripped) | \
        {name for n in kept for name in _subgraph_inputs(n)}
    used = [t for t in stripped.graph.initializer if t.name in read]
    del stripped.graph.initializer[:]
    stripped.graph.initializer.extend(used)
    return stripped


def _starts_at_zero(quantize, constants: dict) -> bool:
    """Whether the QuantizeLinear's range starts at 0: its zero point (a constant; none: uint8
    0) is its integer type's minimum, so it maps every negative value to 0."""
    from onnx import numpy_helper
    name = quantize.input[2] if len(quantize.input) > 2 else ""
    if not name:
        return True
    if name not in constants:
        return False
    zero = numpy_helper.to_array(constants[name])
    return zero.dtype.kind in "iu" and bool(np.all(zero == np.iinfo(zero.dtype).min))


def _graph_outputs(model) -> set[str]:
    return {o.name for o in model.graph.output}


def _live(nodes: list, wanted: set[str]) -> list:
    """The nodes the graph's outputs need (the Q nodes whose pairs went are not)."""
    needed, live = set(wanted), []
    for node in reversed(nodes):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(i for i in node.input if i)
            needed.update(_subgraph_inputs(node))
    return live[::-1]


def _subgraph_inputs(node) -> set[str]:
    """Every name the node's subgraphs (If/Loop/Scan bodies) read: outer values among them."""
    names: set[str] = set()
    for attr in node.attribute:
        for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
            for inner in graph.node:
                names.update(i for i in inner.input if i)
                names.update(_subgraph_inputs(inner))
    return names
