"""`--edgekit-int8-convs-as-matmul` for ONNX QDQ models (issue 37): each quantized convolution
as an int8 im2col + a DequantizeLinear→MatMul pair, in the ONNX graph before the import.

IREE's ONNX input keeps a QDQ convolution integer, but as a direct convolution
(`conv_…_i8xi8xi32`) whose inner loop widens int8 and multiplies-accumulates: measured on the
small CNN at 1 thread, 3.3 ms a call, 30× onnxruntime fp32. A MatMul whose two inputs come
from DequantizeLinear becomes an integer matmul, which data tiling puts on integer dot
products (VNNI; `sdot` on aarch64) — the form pipeline/rewrite_int8.py gives PyTorch's int8
graphs. So here, for `Conv(DQ(xq, s, z), DQ(wq, s_w per output channel), bias)` (one image,
2-D, no groups or dilation):

    xq (int8 NCHW) → Transpose to NHWC → rows (h·w, c) + one row of the zero point z
      → Gather by a constant index (one row per tap: the patches, padding reads the z row,
        which dequantizes to 0) → (pixels, kh·kw·c) → DequantizeLinear(s, z)
    MatMul with DequantizeLinear(wq as (kh·kw·cin, cout), s_w on axis 1) → + bias
      → (1, oh, ow, cout) → Transpose to NCHW

The gather moves whole 4- or 8-byte words (channels padded to 4 with z, weights with 0, when
the weights are symmetric): IREE copies a gathered row element by element, and byte by byte
the gathers took longer than the matmuls (small CNN: ~100 µs against ~55). ONNX cannot view
bytes as words, so an `EdgekitViewDtype` node (domain ai.edgekit) says so and the import
makes it `torch.aten.view.dtype` (toolchain/torch_mlir.py); with_byte_gathers gives the plain
ONNX form for torch-mlir's own conversion (the tosa/linalg lowerings). uint8 activations
(onnxruntime's default) are gathered as int8 (the sign bit flipped: − 128, z too): data
tiling's u8 × s8 matmuls ran ~3× slower than s8 × s8 (measured, same model).

Each convolution's Transpose back to NCHW then moves past the per-tensor QuantizeLinear /
DequantizeLinear / Relu after it (they commute with a transpose exactly) and cancels against
the next convolution's Transpose to NHWC; a mean (sum, max, min) over h and w becomes one over
NHWC's axes (IREE read the NCHW view strided: 3 µs for the small CNN's 64 × 64). The integer
sums are exact, the float steps those of the QDQ model's definition: outputs stay within the
golden tolerance of onnxruntime's. Each per-tensor QuantizeLinear is written as
rewrite_int8.py writes PyTorch's (x · (1/s), clip, rounded by ± 1.5·2²³: _fast_quantize).

`=u8` (int8_convs_as_matmul(unsigned=True), x86 AVX-512 VNNI; the build adds
`--iree-llvmcpu-enable-inner-tiled`): the patches as uint8 (int8 activations, onnxruntime's
QInt8, flipped: + 128), so the matmuls are u8 × s8 on `vpdpbusd`, shaped as PT2E's u8 form
(rewrite_int8._u8_linear, whose zero-point and helpers this shares): per-tensor matmuls with the
per-channel scale and bias (onnxruntime's int32 bias, dequantized) as rows × cout constants,
a nonzero zero point cancelled by extra taps of the zero-point row, and the one-row Gemm head
on two copies of its row then their ReduceMax. Taken only when every contraction of the model
has that form (u8_form); else the `on` form. IREE 3.13's inner-tiled path fails on a matvec
and on a per-channel vector broadcast into a matmul's epilogue (rewrite_int8_matmul.py), the
two things this form reshapes (last round's u8 attempt, per-channel with a one-row head,
failed there, "tensor.expand_shape"; here a head as Concat → matmul → Slice still failed:
IREE folds the slice back into a matvec, iteration sizes [10, 64], hence the ReduceMax).
Small CNN, 1 thread, same run: `on` 0.092 ms, u8 0.086, u8 with the fast quantize and NHWC
mean 0.076 (PT2E u8 0.072, onnxruntime QDQ 0.044). Cost: the rows × cout
constants (module 159 → 306 KB; fp32 270 KB), as the PT2E u8 build's.
"""

from __future__ import annotations

import numpy as np

from edgekit.toolchain.torch_mlir import VIEW_DTYPE

# ops that commute exactly with a transpose when their other inputs are scalars
_ELEMENTWISE = frozenset({"QuantizeLinear", "DequantizeLinear", "Relu"})
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
PREFIX = "_ek_i8mm_"
DOMAIN = "ai.edgekit"


def int8_convs_as_matmul(model, unsigned: bool = False) -> tuple[object, int, int]:
    """(model with its quantized convolutions as int8 im2col + integer MatMul, how many were
    rewritten, how many Conv nodes it has). The model is not changed in place. `unsigned`: the
    `u8` form (module doc), taken only if every contraction of the model has it (u8_form);
    else the model comes back unchanged with 0 rewritten."""
    import onnx
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    if not convs:
        return model, 0, 0
    model = onnx.shape_inference.infer_shapes(model)
    graph = _Graph(model)
    if unsigned and not u8_form(model, graph):
        return model, 0, len(convs)
    rewritten = 0
    nodes = []
    for index, node in enumerate(model.graph.node):
        if unsigned and node.op_type == "Gemm":
            nodes.extend(_u8_gemm(node, _gemm_plan(node, graph), graph, f"{PREFIX}{index}_"))
            continue
        plan = _plan(node, graph) if node.op_type == "Conv" else None
        if plan is None:
            nodes.append(node)
            continue
        nodes.extend(_as_matmul(node, plan, graph, f"{PREFIX}{index}_", unsigned))
        rewritten += 1
    if not rewritten:
        return model, 0, len(convs)
    nodes = _sink_transposes(nodes, graph)
    nodes = _fast_quantize(nodes, graph)
    nodes = _live(nodes, model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    read = {i for n in nodes for i in n.input} | _subgraph_reads(nodes)
    kept = [t for t in out.graph.initializer if t.name in read or
            t.name in {o.name for o in out.graph.output}]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    out.graph.initializer.extend(graph.added)
    del out.graph.value_info[:]     # the importer types every value: inferred afresh
    out.graph.value_info.extend(graph.typed)
    if graph.typed:
        out.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    return onnx.shape_inference.infer_shapes(out), rewritten, len(convs)


class _Graph:
    """What the rewrite reads of the model: producers, initializers, shapes; and the
    initializers it adds."""

    def __init__(self, model):
        from onnx import numpy_helper
        self.producer = {o: n for n in model.graph.node for o in n.output}
        self.values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for n in model.graph.node:     # Constant nodes are initializers by another name
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.shapes = {}
        for v in (*model.graph.input, *model.graph.value_info, *model.graph.output):
            dims = v.type.tensor_type.shape.dim
            if v.type.tensor_type.HasField("shape") and all(d.HasField("dim_value")
                                                            for d in dims):
                self.shapes[v.name] = tuple(d.dim_value for d in dims)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          17)
        self.added = []
        self.typed = []        # value_info of the EdgekitViewDtype outputs (no schema infers them)

    def constant(self, name: str, value: np.ndarray) -> str:
        self.added.append(_tensor(name, value))
        self.values[name] = value
        return name


def _tensor(name: str, value: np.ndarray):
    from onnx import numpy_helper
    return numpy_helper.from_array(np.ascontiguousarray(value), name)


def _nonzero(value) -> bool:
    return value is not None and bool(np.any(value))


def _view(name: str, source: str, target: str, dtype, shape) -> object:
    """The EdgekitViewDtype node: `source`'s bytes as `dtype` (toolchain/torch_mlir.py makes it
    `torch.aten.view.dtype`; no ONNX runtime runs it)."""
    from onnx import helper
    return helper.make_node(VIEW_DTYPE, [source], [target], name=name, domain=DOMAIN,
                            to=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def _value_info(name: str, dtype, shape):
    from onnx import helper
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                         list(shape))


def _attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _plan(conv, graph: _Graph) -> dict | None:
    """The convolution's operands when it is one this rewrite takes, else None."""
    if len(conv.input) < 2:
        return None
    dq_x, dq_w = graph.producer.get(conv.input[0]), graph.producer.get(conv.input[1])
    if not (dq_x is not None and dq_x.op_type == "DequantizeLinear" and
            dq_w is not None and dq_w.op_type == "DequantizeLinear"):
        return None
    a = _attrs(conv)
    if (a.get("group", 1) != 1 or any(d != 1 for d in a.get("dilations", [1, 1])) or
            a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")):
        return None
    wq = graph.values.get(dq_w.input[0])
    x_shape = graph.shapes.get(dq_x.input[0])
    if wq is None or wq.ndim != 4 or wq.dtype not in (np.int8, np.uint8) or x_shape is None:
        return None
    if len(x_shape) != 4 or x_shape[0] != 1 or x_shape[1] != wq.shape[1]:
        return None
    x_scale = graph.values.get(dq_x.input[1])
    x_zp = graph.values.get(dq_x.input[2]) if len(dq_x.input) > 2 and dq_x.input[2] else None
    # the zero point fills the padding (onnxruntime always writes one)
    if x_scale is None or x_scale.size != 1 or x_zp is None or x_zp.size != 1:
        return None
    w_scale = graph.values.get(dq_w.input[1])
    w_zp = graph.values.get(dq_w.input[2]) if len(dq_w.input) > 2 and dq_w.input[2] else None
    axis = _attrs(dq_w).get("axis", 1)
    if w_scale is None or (w_scale.size > 1 and (axis not in (0, -4) or
                                                  w_scale.size != wq.shape[0])):
        return None
    if _attrs(dq_x).get("block_size") or _attrs(dq_w).get("block_size"):
        return None
    kh, kw = wq.shape[2:]
    pads = list(a.get("pads", [0, 0, 0, 0]))
    strides = list(a.get("strides", [1, 1]))
    if len(pads) != 4 or len(strides) != 2 or list(a.get("kernel_shape", [kh, kw])) != [kh, kw]:
        return None
    return {"dq_x": dq_x, "dq_w": dq_w, "wq": wq, "w_scale": w_scale, "w_zp": w_zp,
            "x_shape": x_shape, "x_zp": x_zp, "pads": pads, "strides": strides}


def _as_matmul(conv, plan: dict, graph: _Graph, p: str, unsigned: bool = False) -> list:
    from onnx import helper
    _, c, h, w = plan["x_shape"]
    wq = plan["wq"]
    cout, cin, kh, kw = wq.shape
    pt, pl, pb, pr = plan["pads"]
    sh, sw = plan["strides"]
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    dq_x, dq_w = plan["dq_x"], plan["dq_w"]
    xq = dq_x.input[0]
    zp = plan["x_zp"].reshape(())
    # the patches' row index per output pixel and tap; outside the image, the zero-point row
    oy, ox, i, j = np.meshgrid(np.arange(oh), np.arange(ow), np.arange(kh), np.arange(kw),
                               indexing="ij")
    y, x = oy * sh - pt + i, ox * sw - pl + j
    inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
    # int32: half the bytes of int64 in the module (an index per tap and pixel)
    index = np.where(inside, y * w + x, h * w).reshape(oh * ow, kh * kw)
    const = graph.constant
    x_scale, x_zp_name = dq_x.input[1], const(p + "x_zp", zp)
    node = helper.make_node
    out = [node("Transpose", [xq], [p + "nhwc"], perm=_TO_NHWC, name=p + "to_nhwc"),
           node("Reshape", [p + "nhwc", const(p + "rows_shape", np.array([h * w, c]))],
                [p + "rows"])]
    rows, words = p + "rows", c
    if c % 4 and not _nonzero(plan["w_zp"]):
        # channels (an RGB input) padded to 4 with the zero point, weights with 0: the
        # gather then moves whole int32 words
        extra = -c % 4
        out.append(node("Concat", [rows, const(p + "zp_cols", np.full((h * w, extra), zp,
                                                                      zp.dtype))],
                        [p + "rows4"], axis=1))
        rows, c = p + "rows4", c + extra
        wq = np.pad(wq, ((0, 0), (0, extra), (0, 0), (0, 0)))
    w2 = wq.transpose(2, 3, 1, 0).reshape(kh * kw * c, cout)       # K × cout
    n_taps = kh * kw
    word = np.int64 if c % 8 == 0 else np.int32 if c % 4 == 0 else None
    # the patches' type: int8 for the s8 × s8 form, uint8 for the u8 one; activations of the
    # other type are gathered with their sign bit flipped (± 128, zero point too)
    patches = np.dtype(np.uint8 if unsigned else np.int8)
    flip = word is not None and zp.dtype != patches
    zp_patches = np.array(int(zp) + (128 if unsigned else -128), patches) if flip else zp
    if unsigned:
        # a nonzero zero point: extra taps of the zero-point row, whose weights −Σw make the
        # integer sum subtract zp·Σw (rewrite_int8._u8_linear)
        w2, extra = _with_correction(w2, int(zp_patches), c)
        index = np.concatenate([index, np.full((oh * ow, extra), h * w)], 1)
        n_taps += extra
    index = index.reshape(-1).astype(np.int32)
    w_in = [const(p + "w", w2), dq_w.input[1]]
    if plan["w_zp"] is not None:
        w_in.append(dq_w.input[2])
    out.append(node("Concat", [rows, const(p + "zp_row", np.full((1, c), zp, zp.dtype))],
                    [p + "table"], axis=0))
    table, taps = p + "table", p + "taps"
    if not flip:
        patches = zp.dtype
    if word is not None:
        if flip:
            # uint8 activations (onnxruntime's default) with the sign bit flipped are int8
            # ones (v − 128, zero point too): data tiling has s8 × s8 kernels (VNNI, sdot);
            # its u8 × s8 ones without the inner-tiled path ran ~3× slower (small CNN). The
            # u8 form flips int8 activations to uint8 the same way (v + 128).
            # (the bytes as the other type, ± 128 wrapping: BitwiseXor needs opset 18)
            out += [_view(p + "table_bits", table, p + "table_bits", patches, (h * w + 1, c)),
                    node("Add", [p + "table_bits", const(p + "flip", np.array(
                        128 if unsigned else -128, patches))],
                         [p + "table_flipped"], name=p + "flip")]
            graph.typed.append(_value_info(p + "table_bits", patches, (h * w + 1, c)))
            table = p + "table_flipped"
            graph.values[x_zp_name] = zp_patches
            graph.added = [t for t in graph.added if t.name != x_zp_name]
            const(x_zp_name, zp_patches)
        # four (eight) channels a word: IREE copies a gathered row element by element
        words = c // np.dtype(word).itemsize
        out.append(_view(p + "table_words", table, p + "words", word, (h * w + 1, words)))
        table, taps = p + "words", p + "taps_words"
    out.append(node("Gather", [table, const(p + "index", index)], [taps], axis=0))
    if word is not None:
        out.append(_view(p + "taps_bytes", taps, p + "taps", patches, (index.size, c)))
        graph.typed += [_value_info(p + "words", word, (h * w + 1, words)),
                        _value_info(p + "taps_words", word, (index.size, words)),
                        _value_info(p + "taps", patches, (index.size, c))]
    out.append(node("Reshape", [p + "taps", const(p + "cols_shape",
                                                  np.array([oh * ow, n_taps * c]))],
                    [p + "cols"]))
    bias = conv.input[2] if len(conv.input) > 2 and conv.input[2] else None
    if unsigned:
        out += _u8_matmul(p + "cols", x_scale, w2, plan["w_scale"],
                          _folded(bias, graph), oh * ow, graph, p)
        last = p + "mm_out"
    else:
        out += [
            node("DequantizeLinear", [p + "cols", x_scale, x_zp_name], [p + "dq_cols"]),
            node("DequantizeLinear", w_in, [p + "dq_w"],
                 **({"axis": 1} if plan["w_scale"].size > 1 else {})),
            node("MatMul", [p + "dq_cols", p + "dq_w"], [p + "mm"]),
        ]
        last = p + "mm"
        if bias:
            out.append(node("Add", [last, bias], [p + "biased"]))
            last = p + "biased"
    out += [
        node("Reshape", [last, const(p + "out_shape", np.array([1, oh, ow, cout]))],
             [p + "out_nhwc"]),
        node("Transpose", [p + "out_nhwc"], [conv.output[0]], perm=_TO_NCHW,
             name=p + "to_nchw"),
    ]
    return out


def _with_correction(w2: np.ndarray, zp: int, c: int) -> tuple[np.ndarray, int]:
    """(K × cout int8 weights with the rows that cancel a zero point zp — taps of c channels
    each — appended, how many such taps); (w2, 0) for zp 0."""
    if not zp:
        return w2, 0
    import torch
    from edgekit.pipeline.rewrite_int8 import _correction_taps, _pieces
    wt = torch.from_numpy(np.ascontiguousarray(w2.T))                   # cout × K
    extra = _correction_taps(wt, zp, c)
    pieces = _pieces(-wt.to(torch.int64).sum(1), extra * c).numpy().astype(np.int8)
    return np.concatenate([w2, pieces.T], 0), extra


def _u8_matmul(cols: str, x_scale: str, w2: np.ndarray, w_scale: np.ndarray, bias, rows: int,
               graph: _Graph, p: str) -> list:
    """uint8 `cols` (rows × K, zero point cancelled inside the sum) times int8 `w2` (K × cout)
    as IREE 3.13's inner-tiled data tiling takes it (u8 × s8 on `vpdpbusd`): a per-tensor
    matmul (weight scale 1, zero points 0) with the per-channel weight scale and the bias
    after it as rows × cout constants, as rewrite_int8._u8_linear does for PyTorch's graphs
    (a broadcast vector fused into the matmul's dispatch fails there). Output: p + "mm_out"."""
    from onnx import helper
    cout = w2.shape[1]
    const, node = graph.constant, helper.make_node
    scales = np.broadcast_to(np.asarray(w_scale, np.float32).reshape(1, -1), (rows, cout))
    out = [node("DequantizeLinear", [cols, x_scale, const(p + "u8_zero", np.uint8(0))],
                [p + "dq_cols"]),
           node("DequantizeLinear", [const(p + "w", w2), const(p + "one", np.float32(1.0)),
                                     const(p + "s8_zero", np.int8(0))], [p + "dq_w"]),
           node("MatMul", [p + "dq_cols", p + "dq_w"], [p + "mm"]),
           node("Mul", [p + "mm", const(p + "scales", scales)],
                [p + "mm_scaled" if bias is not None else p + "mm_out"])]
    if bias is not None:
        full = np.broadcast_to(np.asarray(bias, np.float32).reshape(1, -1), (rows, cout))
        out.append(node("Add", [p + "mm_scaled", const(p + "bias", full)], [p + "mm_out"]))
    return out


def u8_form(model, graph: _Graph) -> bool:
    """Whether every contraction of the model has the u8 form: each Conv one _plan takes with
    uint8 activations, symmetric weights and a constant bias; each Gemm one _gemm_plan takes;
    no other contraction (MatMul, batch matmuls: IREE 3.13's inner-tiled path fails on them)."""
    for n in model.graph.node:
        if n.op_type in ("MatMul", "MatMulInteger", "ConvInteger", "ConvTranspose") or \
                n.op_type.startswith("QLinear"):
            return False
        if n.op_type == "Gemm" and _gemm_plan(n, graph) is None:
            return False
        if n.op_type == "Conv":
            plan = _plan(n, graph)
            if plan is None or not _u8_operands(plan, n, graph):
                return False
    return True


def _folded(name: str | None, graph: _Graph) -> np.ndarray | None:
    """A constant, or a DequantizeLinear of constants (onnxruntime's int32 biases), as float32;
    None for anything else."""
    if not name:
        return None
    if name in graph.values:
        return graph.values[name]
    dq = graph.producer.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or _attrs(dq).get("block_size"):
        return None
    q, scale = graph.values.get(dq.input[0]), graph.values.get(dq.input[1])
    zp = graph.values.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else 0
    if q is None or scale is None or zp is None or q.ndim > 1:
        return None
    return ((q.astype(np.int64) - np.asarray(zp, np.int64)) * scale).astype(np.float32)


def _u8_operands(plan: dict, node, graph: _Graph) -> bool:
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    _, _, h, w = plan["x_shape"]
    kh, kw = plan["wq"].shape[2:]
    (top, left, bottom, right), (sh, sw) = plan["pads"], plan["strides"]
    pixels = ((h + top + bottom - kh) // sh + 1) * ((w + left + right - kw) // sw + 1)
    # the u8 form's pixels × cout epilogue constants: as small as the PT2E path's bound
    from edgekit.pipeline.rewrite_int8 import U8_MAX_EPILOGUE
    if pixels * plan["wq"].shape[0] > U8_MAX_EPILOGUE:
        return False
    return (plan["x_zp"].dtype in (np.uint8, np.int8) and plan["wq"].dtype == np.int8 and
            not _nonzero(plan["w_zp"]) and int(np.abs(plan["wq"].astype(np.int32)).max()) <= 127
            and (bias is None or _folded(bias, graph) is not None))


def _gemm_plan(gemm, graph: _Graph) -> dict | None:
    """A Gemm of one row of DequantizeLinear'd 8-bit activations (per tensor) and symmetric int8
    weights (constant, per output channel or per tensor), constant float bias; else None."""
    a = _attrs(gemm)
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        return None
    dq_x, dq_w = graph.producer.get(gemm.input[0]), graph.producer.get(gemm.input[1])
    if not (dq_x is not None and dq_x.op_type == "DequantizeLinear" and
            dq_w is not None and dq_w.op_type == "DequantizeLinear"):
        return None
    wq = graph.values.get(dq_w.input[0])
    x_shape = graph.shapes.get(dq_x.input[0])
    x_zp = graph.values.get(dq_x.input[2]) if len(dq_x.input) > 2 and dq_x.input[2] else None
    w_zp = graph.values.get(dq_w.input[2]) if len(dq_w.input) > 2 and dq_w.input[2] else None
    w_scale = graph.values.get(dq_w.input[1])
    x_scale = graph.values.get(dq_x.input[1])
    bias = _folded(gemm.input[2], graph) if len(gemm.input) > 2 else None
    if (wq is None or wq.ndim != 2 or wq.dtype != np.int8 or _nonzero(w_zp) or
            x_shape is None or len(x_shape) != 2 or x_shape[0] != 1 or x_zp is None or
            x_zp.dtype not in (np.uint8, np.int8) or x_zp.size != 1 or x_scale is None or
            x_scale.size != 1 or
            w_scale is None or int(np.abs(wq.astype(np.int32)).max()) > 127 or
            (len(gemm.input) > 2 and gemm.input[2] and bias is None) or
            _attrs(dq_w).get("block_size")):
        return None
    w2 = wq.T if a.get("transB", 0) else wq                                 # K × cout
    axis = _attrs(dq_w).get("axis", 1)
    if w_scale.size > 1 and (axis % 2) != (0 if a.get("transB", 0) else 1):
        return None
    return {"xq": dq_x.input[0], "x_scale": dq_x.input[1], "zp": x_zp.reshape(()),
            "opset": graph.opset,
            "w2": np.ascontiguousarray(w2), "w_scale": w_scale, "bias": bias}


def _u8_gemm(gemm, plan: dict, graph: _Graph, p: str) -> list:
    """The one-row Gemm on two copies of its row (IREE's inner-tiled path fails on a
    matvec, as rewrite_int8._two_rows says), zero point cancelled by extra columns of it,
    then one of the two rows."""
    from onnx import helper
    node, const = helper.make_node, graph.constant
    zp, xq, out = plan["zp"], plan["xq"], []
    if zp.dtype == np.int8:     # as uint8: v + 128, zero point too (one row: plain ONNX)
        from onnx import TensorProto
        out += [node("Cast", [xq], [p + "x_i32"], to=TensorProto.INT32),
                node("Add", [p + "x_i32", const(p + "flip", np.int32(128))], [p + "x_up"]),
                node("Cast", [p + "x_up"], [p + "x_u8"], to=TensorProto.UINT8)]
        xq, zp = p + "x_u8", np.array(int(zp) + 128, np.uint8)
    w2, extra = _with_correction(plan["w2"], int(zp), 1)
    out.append(node("Concat", [xq, xq], [p + "two"], axis=0))
    rows = p + "two"
    if extra:
        out.append(node("Concat", [rows, const(p + "zp_cols", np.full((2, extra), zp,
                                                                      np.uint8))],
                        [p + "two_zp"], axis=1))
        rows = p + "two_zp"
    out += _u8_matmul(rows, plan["x_scale"], w2, plan["w_scale"], plan["bias"], 2, graph, p)
    # the larger of the two equal rows (IREE folds a slice of the product back into a matvec)
    if plan["opset"] >= 18:
        out.append(node("ReduceMax", [p + "mm_out", const(p + "axes", np.array([0]))],
                        [gemm.output[0]], keepdims=1))
    else:
        out.append(node("ReduceMax", [p + "mm_out"], [gemm.output[0]], axes=[0], keepdims=1))
    return out


def _perm(node) -> list | None:
    if node.op_type != "Transpose":
        return None
    return list(_attrs(node).get("perm", []))


def _scalar_operands(node, graph: _Graph) -> bool:
    return all(graph.values.get(i) is not None and graph.values[i].size == 1
               for i in node.input[1:] if i)


def _sink_transposes(nodes: list, graph: _Graph) -> list:
    """Move each added Transpose to NCHW past the per-tensor elementwise ops that read it (each
    reader gets its own op on the NHWC tensor, then a transpose), and drop a Transpose to NHWC
    of a Transpose to NCHW (its reads go to the NHWC tensor)."""
    from onnx import helper
    changed = True
    while changed:
        changed = False
        producer = {o: n for n in nodes for o in n.output}
        out = []
        for n in nodes:
            src = producer.get(n.input[0]) if n.input else None
            ours = src is not None and src.name.startswith(PREFIX) and _perm(src) == _TO_NCHW
            if ours and _spatial_reduction(n, graph):
                # a reduction over NCHW's h, w (keepdims 0: (1, c) either way) is one over
                # NHWC's: IREE otherwise reads the channels-last tensor strided (small CNN's
                # mean: a 3 µs dispatch)
                axes = [1, 2]
                moved = helper.make_node(n.op_type, [src.input[0]], list(n.output), name=n.name,
                                         keepdims=0, **({} if graph.opset >= 18 else
                                                        {"axes": axes}))
                if graph.opset >= 18:
                    moved.input.append(graph.constant(f"{n.output[0]}{PREFIX}axes",
                                                      np.array(axes)))
                out.append(moved)
                changed = True
            elif ours and _perm(n) == _TO_NHWC:
                out.append(helper.make_node("Identity", [src.input[0]], list(n.output),
                                            name=PREFIX + "cancelled"))
                changed = True
            elif (ours and n.op_type in _ELEMENTWISE and _scalar_operands(n, graph) and
                  not _attrs(n).get("block_size")):
                inner = f"{n.output[0]}{PREFIX}nhwc"
                moved = helper.make_node(n.op_type, [src.input[0], *n.input[1:]], [inner])
                moved.attribute.extend(a for a in n.attribute if a.name != "axis")
                out += [moved, helper.make_node("Transpose", [inner], [n.output[0]],
                                                perm=_TO_NCHW, name=f"{src.name}_")]
                changed = True
            else:
                out.append(n)
        nodes = out
    return _without_identities(nodes)


def _spatial_reduction(node, graph: _Graph) -> bool:
    """A ReduceMean/Sum/Max/Min over axes 2 and 3 of a 4-D tensor, keepdims 0."""
    if node.op_type not in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
        return False
    a = _attrs(node)
    if a.get("keepdims", 1) != 0 or a.get("noop_with_empty_axes", 0):
        return False
    axes = a.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = graph.values.get(node.input[1])
        axes = None if value is None else [int(v) for v in value.reshape(-1)]
    return axes is not None and sorted(x % 4 for x in axes) == [2, 3]


# 1.5·2²³: adding and subtracting it rounds a float32 of magnitude < 2²² to an integer, half to
# even (the default rounding mode)
_ROUNDER = np.float32(1.5 * 2 ** 23)


def _fast_quantize(nodes: list, graph: _Graph) -> list:
    """Each per-tensor QuantizeLinear to int8/uint8 (constant scale and zero point) as
    clip(x · (1/s) + zp) rounded by + 1.5·2²³ − 1.5·2²³, then cast: rewrite_int8.py's form
    for PyTorch's graphs (IREE 3.13 lowers the op to a division and a bit-by-bit round half to
    even, ~30 vector instructions an element). x · (1/s) for x / s: at most one step apart,
    on an exact tie only."""
    from onnx import helper
    out = []
    for n in nodes:
        scale = graph.values.get(n.input[1]) if n.op_type == "QuantizeLinear" else None
        zp = graph.values.get(n.input[2]) if scale is not None and len(n.input) > 2 and \
            n.input[2] else None
        if (zp is None or scale.size != 1 or zp.size != 1 or zp.dtype not in (np.int8, np.uint8)
                or scale.dtype != np.float32 or _attrs(n).get("block_size")
                or _attrs(n).get("saturate", 1) != 1 or not float(scale.reshape(())) > 0):
            out.append(n)
            continue
        info = np.iinfo(zp.dtype)
        p, const = f"{n.output[0]}{PREFIX}q_", graph.constant
        to = helper.np_dtype_to_tensor_dtype(zp.dtype)
        out += [
            helper.make_node("Mul", [n.input[0], const(p + "inv", np.float32(
                1.0 / np.float32(scale.reshape(()))))], [p + "scaled"]),
            helper.make_node("Add", [p + "scaled", const(p + "zp", np.float32(zp.reshape(())))],
                             [p + "shifted"]),
            helper.make_node("Clip", [p + "shifted", const(p + "lo", np.float32(info.min)),
                                      const(p + "hi", np.float32(info.max))], [p + "clipped"]),
            helper.make_node("Add", [p + "clipped", const(p + "r", _ROUNDER)], [p + "up"]),
            helper.make_node("Sub", [p + "up", p + "r"], [p + "rounded"]),
            helper.make_node("Cast", [p + "rounded"], list(n.output), to=to)]
    return out


def _without_identities(nodes: list) -> list:
    """The reads of a cancelled pair's Identity go to its input (an Identity that a graph output
    names stays; _live drops the others)."""
    renamed = {n.output[0]: n.input[0] for n in nodes
               if n.op_type == "Identity" and n.name == PREFIX + "cancelled"}

    def root(name):
        while name in renamed:
            name = renamed[name]
        return name
    for n in nodes:
        if n.name == PREFIX + "cancelled":
            n.input[0] = root(n.input[0])
            continue
        for k, name in enumerate(n.input):
            if name in renamed:
                n.input[k] = root(name)
    return nodes


def _subgraph_reads(nodes) -> set[str]:
    """Names the bodies of If/Loop/Scan nodes read (from the enclosing graph, perhaps)."""
    from onnx import helper
    reads = set()
    for n in nodes:
        for a in n.attribute:
            value = helper.get_attribute_value(a)
            for g in (value if isinstance(value, list) else [value]):
                if hasattr(g, "node"):
                    reads |= {i for m in g.node for i in m.input} | _subgraph_reads(g.node)
    return reads


def _live(nodes: list, model) -> list:
    """The nodes whose outputs something reads (a graph output, a subgraph or a live node),
    in order."""
    needed = {o.name for o in model.graph.output} | _subgraph_reads(nodes)
    live = []
    for n in reversed(nodes):
        if any(o in needed for o in n.output):
            live.append(n)
            needed.update(i for i in n.input if i)
    return live[::-1]


def lowering_note(rewritten: int, total: int, flag: str, unsigned: bool = False) -> str:
    how = ("" if unsigned or not flag.endswith("=u8") else
           " — its `on` form: a contraction of this model has no u8 form")
    return (f"{rewritten} of {total} int8 convolutions as int8 im2col + integer matmul "
            f"(ONNX QDQ graph, {flag}{how})")


def with_byte_gathers(model):
    """The model with each word gather (EdgekitViewDtype → Gather → EdgekitViewDtype) as a
    plain Gather of the bytes: standard ONNX, for torch-mlir's ONNX→torch conversion (the tosa
    and linalg lowerings, which have no `view.dtype`); the model itself if it has none."""
    import onnx
    views = {n.output[0]: n for n in model.graph.node if n.op_type == VIEW_DTYPE}
    if not views:
        return model
    from onnx import TensorProto
    gathers = {n.output[0]: n for n in model.graph.node
               if n.op_type == "Gather" and n.input[0] in views}
    flips = {n.output[0]: n for n in model.graph.node
             if n.op_type == "Add" and n.name.startswith(PREFIX)}
    nodes, added = [], []
    for n in model.graph.node:
        if n.op_type == VIEW_DTYPE and n.input[0] in gathers:
            gather = gathers[n.input[0]]
            table = views[gather.input[0]].input[0]
            flip = flips.get(table)
            if flip is not None:
                flip = views[flip.input[0]]     # its input: the uint8 table
            if flip is None:
                nodes.append(onnx.helper.make_node("Gather", [table, gather.input[1]],
                                                   list(n.output), axis=0))
                continue
            # the flipped bytes as values of the other type: uint8 ones as int8, v − 128
            # (the `on` form), int8 ones as uint8, v + 128 (`u8`), computed in int32
            to = onnx.helper.get_attribute_value(n.attribute[0])
            g, wide = n.output[0] + "_gathered", n.output[0] + "_i32"
            nodes += [onnx.helper.make_node("Gather", [flip.input[0], gather.input[1]], [g],
                                            axis=0),
                      onnx.helper.make_node("Cast", [g], [wide + "0"], to=TensorProto.INT32),
                      onnx.helper.make_node("Sub", [wide + "0", n.output[0] + "_128"], [wide]),
                      onnx.helper.make_node("Cast", [wide], list(n.output), to=to)]
            added.append(onnx.numpy_helper.from_array(
                np.array(128 if to == TensorProto.INT8 else -128, np.int32),
                n.output[0] + "_128"))
        elif n.op_type != VIEW_DTYPE and n.output[0] not in gathers and \
                n.output[0] not in flips:
            nodes.append(n)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(added)
    kept = {o for n in nodes for o in n.output}
    typed = [v for v in out.graph.value_info if v.name in kept or
             v.name in {i for n in nodes for i in n.input}]
    del out.graph.value_info[:]
    out.graph.value_info.extend(typed)
    # the importer types each value from value_info: the flips' gathers and casts are new
    return onnx.shape_inference.infer_shapes(out)
