"""ONNX models that arrive quantized (QDQ or QOperator) are built as int8 through IREE's ONNX input.

A QDQ model (onnxruntime's `quantize_static(..., quant_format=QuantFormat.QDQ)`) keeps float
operators between QuantizeLinear/DequantizeLinear pairs; IREE's ONNX input turns a contraction
whose inputs both come from DequantizeLinear into integer math (measured: 5 of 5 on a CNN, 6 of 6
on a transformer block). The QOperator format (QLinearConv, QLinearMatMul, ConvInteger,
MatMulInteger, …) names the integer contraction itself; IREE's ONNX input compiles it, and the
same int8 contraction census as for QDQ checks the compiled module (lower.check_quantized).

Golden outputs are the QDQ model's own outputs in onnxruntime (unoptimized); with
`quantize.float_model` the accuracy report compares it with the fp32 model it came from.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass

from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, ModelLoadError, QuantizationError
from edgekit.models.bundle import QuantizationNote
from edgekit.pipeline.export import ExportedModel

# Operators of onnxruntime's QOperator format and of dynamic quantization (ai.onnx and
# com.microsoft): integer kernels with no QDQ structure for the compiler to work from.
QOPERATOR_OPS = frozenset({
    "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm", "QLinearAdd",
    "QLinearMul", "QLinearConcat", "QLinearGlobalAveragePool", "QLinearAveragePool",
    "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax", "QLinearReduceMean", "QLinearWhere",
    "QAttention", "QEmbedLayerNormalization", "DynamicQuantizeLinear", "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat", "DynamicQuantizeLSTM", "QLinearConvTranspose"})
# … of which the ones that are contractions (what the int8 census counts)
QOPERATOR_CONTRACTIONS = frozenset({
    "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm",
    "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QAttention", "QLinearConvTranspose"})
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
CONTRACTIONS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
GOLDEN = "outputs of the quantized ONNX model in onnxruntime, unoptimized (what the module must reproduce)"


@dataclass(frozen=True)
class QdqSummary:
    contractions: int         # Conv/MatMul/Gemm nodes in the graph (QOperator: its integer ones)
    quantized: int            # … whose first two inputs both come from DequantizeLinear
    weights: str              # per-channel | per-tensor | mixed
    format: str = "QDQ"       # QDQ | QOperator


def qdq_summary(model, where: str) -> QdqSummary | None:
    """What a quantized model quantizes; None for a float model."""
    ops = Counter((node.domain or "ai.onnx", node.op_type) for node in model.graph.node)
    qoperator = [n for n in model.graph.node if n.op_type in QOPERATOR_OPS]
    if qoperator:
        contractions = [n for n in qoperator if n.op_type in QOPERATOR_CONTRACTIONS]
        return QdqSummary(contractions=len(contractions), quantized=len(contractions),
                          weights="", format="QOperator")
    contrib = sorted({op for domain, op in ops if op in QDQ_OPS and domain != "ai.onnx"})
    if contrib:
        raise QuantizationError(
            f"the model uses onnxruntime's contrib {', '.join(contrib)} (com.microsoft domain: "
            "int16/int4 or `UseQDQContribOps`)", where=where,
            hint="re-export with int8/uint8 types and extra_options={'UseQDQContribOps': False}")
    if not any(op in QDQ_OPS for _, op in ops):
        return None
    dequantized = {node.output[0]: node for node in model.graph.node
                   if node.op_type == "DequantizeLinear"}
    initializers = {t.name: t for t in model.graph.initializer}
    contractions = [n for n in model.graph.node if n.op_type in CONTRACTIONS]
    quantized = [n for n in contractions
                 if len(n.input) >= 2 and all(i in dequantized for i in n.input[:2])]
    # the second input's DequantizeLinear, when it reads a weight (not activation×activation)
    weight_dqs = [dequantized[n.input[1]] for n in quantized]
    granularity = {_scale_kind(dq, initializers) for dq in weight_dqs
                   if dq.input[0] in initializers}
    weights = granularity.pop() if len(granularity) == 1 else ("mixed" if granularity else "")
    return QdqSummary(contractions=len(contractions), quantized=len(quantized), weights=weights)


def _scale_kind(dequantize, initializers) -> str:
    scale = initializers.get(dequantize.input[1])
    size = math.prod(scale.dims) if scale is not None else 1
    return "per-channel" if size > 1 else "per-tensor"


def quantized_onnx(recipe: Recipe, exported: ExportedModel) -> ExportedModel:
    """The quantize stage for ONNX sources: mark a QDQ or QOperator model int8 (its contractions are then
    checked after compiling) and, given the fp32 model, report what quantizing cost."""
    quantize = recipe.quantize
    where = str(recipe.resolve(recipe.model.onnx or ""))
    summary = qdq_summary(exported.program, where)
    if summary is None or summary.quantized == 0:
        if quantize is None:
            return exported
        found = ("no QuantizeLinear/DequantizeLinear" if summary is None else
                 f"no contraction with quantized inputs (of {summary.contractions})")
        raise ConfigError(f"`quantize: int8` on an ONNX model needs a QDQ or QOperator model; this one has "
                          f"{found}", where=str(recipe.path), key="quantize",
                          hint="quantize it with onnxruntime's quantize_static(..., "
                               "quant_format=QuantFormat.QDQ), or drop `quantize:`")
    report = None
    if quantize is not None and quantize.float_model:
        report = _accuracy_vs_float(recipe, exported)
        from edgekit.pipeline.quantize.accuracy import check_floor
        check_floor(report, quantize.min_cosine, "int8", where=f"{recipe.path} (quantize)")
    note = QuantizationNote(
        mode="int8", weights=summary.weights, quantized_ops=summary.quantized,
        calibration=f"before the build (ONNX {summary.format} model)",
        allow_float_contractions=bool(quantize and quantize.allow_float_contractions),
        accuracy=report, golden=GOLDEN)
    return dataclasses.replace(exported, quantization=note)


def _accuracy_vs_float(recipe: Recipe, exported: ExportedModel):
    from edgekit.pipeline.frontends.onnx_source import (load_onnx, onnx_inputs,
                                                        onnxruntime_runner)
    from edgekit.pipeline.quantize.accuracy import accuracy_report
    from edgekit.pipeline.quantize.samples import held_out_samples
    path = recipe.resolve(recipe.quantize.float_model)
    float_model = load_onnx(path)
    names = tuple(s.name for s in exported.inputs)
    theirs = {name: (shape, dtype) for name, shape, dtype in onnx_inputs(float_model)}
    ours = {s.name: (tuple(s.shape), s.dtype) for s in exported.inputs}
    if any(theirs.get(name) != sig for name, sig in ours.items()):
        raise ModelLoadError("quantize.float_model takes other inputs than the QDQ model: "
                             f"{theirs} vs {ours}", where=str(path),
                             hint="name the fp32 model this QDQ model was quantized from")
    samples, source = held_out_samples(recipe, exported.inputs)
    report = accuracy_report(onnxruntime_runner(float_model, names),
                             onnxruntime_runner(exported.program, names),
                             samples, source, [o.name for o in exported.outputs],
                             recipe.validation)
    return report.model_copy(update={"reference": f"fp32 ONNX model {recipe.quantize.float_model}"})
