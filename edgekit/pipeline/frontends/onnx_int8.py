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
the next convolution's Transpose to NHWC. The integer sums are exact, the float steps those of
the QDQ model's definition: outputs stay within the golden tolerance of onnxruntime's.
"""

from __future__ import annotations

import numpy as np

from edgekit.toolchain.torch_mlir import VIEW_DTYPE

# ops that commute exactly with a transpose when their other inputs are scalars
_ELEMENTWISE = frozenset({"QuantizeLinear", "DequantizeLinear", "Relu"})
_TO_NHWC, _TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]
PREFIX = "_ek_i8mm_"
DOMAIN = "ai.edgekit"


def int8_convs_as_matmul(model) -> tuple[object, int, int]:
    """(model with its quantized convolutions as int8 im2col + integer MatMul, how many were
    rewritten, how many Conv nodes it has). The model is not changed in place."""
    import onnx
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    if not convs:
        return model, 0, 0
    model = onnx.shape_inference.infer_shapes(model)
    graph = _Graph(model)
    rewritten = 0
    nodes = []
    for index, node in enumerate(model.graph.node):
        plan = _plan(node, graph) if node.op_type == "Conv" else None
        if plan is None:
            nodes.append(node)
            continue
        nodes.extend(_as_matmul(node, plan, graph, f"{PREFIX}{index}_"))
        rewritten += 1
    if not rewritten:
        return model, 0, len(convs)
    nodes = _sink_transposes(nodes, graph)
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


def _as_matmul(conv, plan: dict, graph: _Graph, p: str) -> list:
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
    index = np.where(inside, y * w + x, h * w).reshape(-1).astype(np.int32)
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
    w_in = [const(p + "w", w2), dq_w.input[1]]
    if plan["w_zp"] is not None:
        w_in.append(dq_w.input[2])
    word = np.int64 if c % 8 == 0 else np.int32 if c % 4 == 0 else None
    out.append(node("Concat", [rows, const(p + "zp_row", np.full((1, c), zp, zp.dtype))],
                    [p + "table"], axis=0))
    table, taps, patches = p + "table", p + "taps", zp.dtype
    if word is not None:
        if zp.dtype == np.uint8:
            # uint8 activations (onnxruntime's default) with the sign bit flipped are int8
            # ones (v − 128, zero point too): data tiling has s8 × s8 kernels (VNNI, sdot),
            # not u8 × s8 ones (measured, small CNN: its matmuls ~3× slower as u8)
            # (the bytes as int8, + 128 wrapping: BitwiseXor needs opset 18)
            out += [_view(p + "table_bits", table, p + "table_bits", np.int8, (h * w + 1, c)),
                    node("Add", [p + "table_bits", const(p + "flip", np.int8(-128))],
                         [p + "table_s8"], name=p + "flip")]
            graph.typed.append(_value_info(p + "table_bits", np.int8, (h * w + 1, c)))
            table, patches = p + "table_s8", np.int8
            graph.values[x_zp_name] = np.int8(int(zp) - 128)
            graph.added = [t for t in graph.added if t.name != x_zp_name]
            const(x_zp_name, np.array(int(zp) - 128, np.int8))
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
    out += [
        node("Reshape", [p + "taps", const(p + "cols_shape", np.array([oh * ow,
                                                                       kh * kw * c]))],
             [p + "cols"]),
        node("DequantizeLinear", [p + "cols", x_scale, x_zp_name], [p + "dq_cols"]),
        node("DequantizeLinear", w_in, [p + "dq_w"],
             **({"axis": 1} if plan["w_scale"].size > 1 else {})),
        node("MatMul", [p + "dq_cols", p + "dq_w"], [p + "mm"]),
    ]
    last = p + "mm"
    if len(conv.input) > 2 and conv.input[2]:
        out.append(node("Add", [last, conv.input[2]], [p + "biased"]))
        last = p + "biased"
    out += [
        node("Reshape", [last, const(p + "out_shape", np.array([1, oh, ow, cout]))],
             [p + "out_nhwc"]),
        node("Transpose", [p + "out_nhwc"], [conv.output[0]], perm=_TO_NCHW,
             name=p + "to_nchw"),
    ]
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
            if ours and _perm(n) == _TO_NHWC:
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


def lowering_note(rewritten: int, total: int, flag: str) -> str:
    how = (" — its `on` form: uint8 patches are made for PyTorch's int8 graphs only"
           if flag.endswith("=u8") else "")
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
            # the flipped uint8 bytes as int8 values: v − 128, computed in int32
            g, wide = n.output[0] + "_u8", n.output[0] + "_i32"
            nodes += [onnx.helper.make_node("Gather", [flip.input[0], gather.input[1]], [g],
                                            axis=0),
                      onnx.helper.make_node("Cast", [g], [wide + "0"], to=TensorProto.INT32),
                      onnx.helper.make_node("Sub", [wide + "0", n.output[0] + "_128"], [wide]),
                      onnx.helper.make_node("Cast", [wide], list(n.output), to=TensorProto.INT8)]
            added.append(onnx.numpy_helper.from_array(np.array(128, np.int32),
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
    return out
