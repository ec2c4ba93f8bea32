"""The `u8` form (pipeline/rewrite_int8.py) for int8 linears of many rows, and whether a
whole program took it (issue 37).

x86 with AVX-512 VNNI runs u8 × s8 products on `vpdpbusd` (64 an instruction) only through
IREE 3.13's inner-tiled data tiling (`--iree-llvmcpu-enable-inner-tiled`), which fails on
matvecs, on epilogues that broadcast a vector into the matmul's dispatch (a PT2E linear's
per-channel weight scale), on a linear of 3-D activations (the f32 transformer block's proj)
and on every batch matmul (int8 or f32: attention's q·kᵀ and p·v). So a linear of int8
activations (per tensor, a number zero point) and stored symmetric per-channel int8 weights
takes `_u8_linear` on its rows flattened to 2-D (activation as uint8, sign flipped;
per-tensor matmul; the per-channel scale and bias as rows × cout constants; the zero point
cancelled inside the integer sum by extra columns), and `contraction_forms` says whether
every contraction of a program is such a u8 × s8 linear: only then may the build turn the
inner-tiled path on (pipeline/rewrite.py).

Measured (transformer block, 16 rows, 1 thread, bench/dispatch_profile.py): the inner-tiled
u8 linears run slower than the s8 × s8 mmt4d ukernels (16x192x64: 4.0 vs 1.8 µs fastest
call; their zero-point columns add 16 to K = 64) — so `host`'s default takes the u8 form of a
linear only from DEFAULT_MIN_ROWS rows — and attention's matmuls have no u8 form
(both operands carry zero points: the correction sums are the broadcasts the path fails on;
with the linears as u8 and attention in exact f32, unrolled per head or as one block-diagonal
matmul, the module took 1.7-1.9× its fp32 build). So a model with a batch matmul keeps the
`on` form (1.15× its fp32 there: its contractions are faster than fp32's, the activations'
quantize steps cost more — attention kept float would make it 1.05×).
"""

from __future__ import annotations

import math
import re

import torch

from edgekit.pipeline.rewrite_int8 import (_correction_taps, _is, _ops, _u8_linear, _value, _zeros,
                                           reexported)

# ATen ops IREE compiles as contractions (matmuls, convolutions, attention)
_CONTRACTION = re.compile(r"conv|linear|matmul|^mm$|^bmm$|addmm|addbmm|addmv|^mv$|^dot$|"
                          r"einsum|tensordot|attention")


def _bias(node):
    return node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")


# Fewest rows for which `host`'s default takes the u8 form of a linear (pipeline/rewrite.py).
# In process, 1 thread, a pre-norm MLP block (two linears, GELU, residual), int8 / its fp32:
# 16 rows x 32 -> 64 -> 32: the `on` form 1.10x, u8 + inner-tiled 1.27x; 128 rows x 128 ->
# 256 -> 128: `on` 1.13x, u8 1.05x (with the zero point's extra columns, a short K costs more).
DEFAULT_MIN_ROWS = 64


def u8_linear_candidate(gm: torch.fx.GraphModule, node, min_rows: int = 2) -> bool:
    """A linear the u8 form takes: int8 activations of at least `min_rows` rows (one row: the
    two-row form of rewrite_int8), per-channel symmetric stored int8 weights, a stored bias."""
    q = _ops()
    if not (node.op == "call_function" and node.target is torch.ops.aten.linear.default):
        return False
    x, w, bias = node.args[0], node.args[1], _bias(node)
    shape = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return (_is(x, q.dequantize_per_tensor.default) and x.args[5] == torch.int8 and
            isinstance(x.args[2], int) and _is(w, q.dequantize_per_channel.default) and
            w.args[3] == 0 and getattr(w.args[0], "op", None) == "get_attr" and
            _zeros(gm, w.args[2]) and
            (bias is None or getattr(bias, "op", None) == "get_attr") and
            shape is not None and shape.dim() >= 2 and
            math.prod(shape.shape[:-1]) >= max(min_rows, 2))


def _rows_u8(gm: torch.fx.GraphModule, linear) -> None:
    """linear(dequantize(xq), dequantize_per_channel(wq), b) over rows × K as `_u8_linear`,
    reshaped back to the activation's leading dimensions."""
    aten, g = torch.ops.aten, gm.graph
    dq_x, dq_w, bias = linear.args[0], linear.args[1], _bias(linear)
    xq, x_scale, x_zp = dq_x.args[:3]
    shape = list(dq_x.meta["val"].shape)
    rows, k = math.prod(shape[:-1]), shape[-1]
    weight = _value(gm, dq_w.args[0])
    with g.inserting_before(linear):
        flip = g.call_function(aten.scalar_tensor.default, (-128,), {"dtype": torch.int8})
        xu = g.call_function(aten.view.dtype, (g.call_function(aten.bitwise_xor.Tensor,
                                                               (xq, flip)), torch.uint8))
        cols = g.call_function(aten.reshape.default, (xu, [rows, k]))
        zp = x_zp + 128
        extra = _correction_taps(weight, zp, 1) if zp else 0
        if extra:
            fill = g.call_function(aten.full.default, ([rows, extra], zp), {"dtype": torch.uint8})
            cols = g.call_function(aten.cat.default, ([cols, fill], 1))
        out = _u8_linear(gm, linear.name, cols, x_scale, zp, weight, _value(gm, dq_w.args[1]),
                         _value(gm, bias) if bias is not None else None, rows, extra)
        out = g.call_function(aten.reshape.default, (out, [*shape[:-1], weight.shape[0]]))
    linear.replace_all_uses_with(out)
    g.erase_node(linear)


def u8_linears(program: torch.export.ExportedProgram, min_rows: int = 2
               ) -> tuple[torch.export.ExportedProgram, int]:
    """(the program with its int8 linears of at least `min_rows` rows in the u8 form, how
    many)."""
    gm = program.module()
    linears = [n for n in gm.graph.nodes if u8_linear_candidate(gm, n, min_rows)]
    if not linears:
        return program, 0
    for node in linears:
        _rows_u8(gm, node)
    return reexported(gm), len(linears)


def _is_u8_linear(node) -> bool:
    """linear(dequantize(uint8 rows), dequantize(int8 weights, zero point 0)): `_u8_linear`'s."""
    q = _ops()
    x, w = node.args[0], node.args[1]
    return (node.target is torch.ops.aten.linear.default and
            _is(x, q.dequantize_per_tensor.default) and x.args[5] == torch.uint8 and
            _is(w, q.dequantize_per_tensor.default) and w.args[5] == torch.int8 and
            w.args[2] == 0 and x.meta["val"].dim() == 2 and x.meta["val"].shape[0] > 1)


def contraction_forms(program: torch.export.ExportedProgram) -> tuple[int, list[str]]:
    """(how many contractions are u8 × s8 linears, the ops of the others)."""
    u8, others = 0, []
    for node in program.graph_module.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not _CONTRACTION.search(node.target._opname):
            continue
        if _is_u8_linear(node):
            u8 += 1
        else:
            others.append(str(node.target))
    return u8, others
