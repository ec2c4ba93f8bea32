"""`--edgekit-int8-convs-as-matmul=on`: quantized convolutions as an int8 im2col + an integer
matmul (issue 37).

IREE 3.13 compiles a PT2E int8 convolution as a direct convolution whose inner loop widens
int8 to int16/int32 and multiplies-accumulates (aarch64: `smlal`, `edgekit inspect --kernels`
shows it; small CNN on rpi5: ~170 stack spills in the hot loop, no `sdot`). Its own im2col
(`--iree-global-opt-use-im2col-for-convs`) and edgekit's float im2col rewrite turn the
convolution into an f32 matmul. An int8 matmul, data-tiled, becomes an s8×s8→s32 `mmt4d` that
runs on integer dot products (`sdot` with +dotprod, VNNI on x86).

So, in the quantized graph, `conv2d(dequantize(xq), dequantize_per_channel(wq, axis 0), b)`
becomes: the patches gathered from the int8 `xq` itself (channels-last taps, padded with the
activation's zero point so a padded tap dequantizes to 0), then
`linear(dequantize(patches), dequantize_per_channel(wq as cout × (kh·kw·cin), axis 0), b)` —
the pattern torch-mlir already fuses into an integer matmul (the classifier head's). Grouped,
dilated or dynamically shaped convolutions are left as they are. Each convolution's permute
back to NCHW moves past the ReLU and requantization after it and cancels against the next
one's permute to NHWC, so IREE sees pixels × cout matmuls, not transposed ones.

`--edgekit-int8-convs-as-matmul=u8` (x86 with AVX-512 VNNI, with IREE's
`--iree-llvmcpu-enable-inner-tiled`): s8 × s8 data tiling runs on `vpdpwssd` (int16 pairs,
32 products an instruction), which bounds the small CNN's matmuls. The patches as uint8 (the
sign bit flipped: + 128, zero point too) make them u8 × s8 matmuls, which the inner-tiled path
puts on `vpdpbusd` (64 products). That path (IREE 3.13) fails on a matvec and on any epilogue
fused into the matmul that broadcasts a per-channel vector, so here (see _u8_linear) the matmul
is per-tensor with the per-channel scale and bias as full rows × cout constants after it, a
nonzero activation zero point is cancelled inside the integer sum, and a one-row linear (the
classifier head) runs on two copies of its row. Integer sums and the same float operations in
the same order: the module's outputs are the `on` module's, bit for bit.

Both forms write each per-tensor quantize (the requantization fused into every matmul's
epilogue, and the input's) as PyTorch defines it, `clamp(round(x · (1/scale)) + zp)`, with the
rounding as + 1.5·2²³ − 1.5·2²³ after the clamp: IREE 3.13 lowers the op to a division and a
bit-by-bit round half to even, ~30 vector instructions an element (small CNN, u8, fastest
calls: the three requantizing matmuls 9.3/8.2/3.7 → 7.6/7.0/2.7 µs, the input's quantize
2.0 → 1.1 µs). Exact: the same values as PyTorch's quantized model. A model with nothing to
rewrite (no convolution, no one-row linear) gets this rounding too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from edgekit.errors import LoweringError

_q = None


def _ops():
    global _q
    if _q is None:
        _q = torch.ops.quantized_decomposed
    return _q


def _is(node, op) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is op


def _convertible(node) -> bool:
    q = _ops()
    if node.target is not torch.ops.aten.conv2d.default:
        return False
    args = list(node.args) + [None] * (7 - len(node.args))
    x, w = args[0], args[1]
    stride, padding, dilation, groups = (args[3] or [1, 1], args[4] or [0, 0],
                                         args[5] or [1, 1], args[6] or 1)
    if not (_is(x, q.dequantize_per_tensor.default) and
            _is(w, q.dequantize_per_channel.default) and w.args[3] == 0):
        return False
    if groups != 1 or list(dilation) != [1, 1] or isinstance(padding, str):
        return False
    shape = x.meta.get("val")
    return shape is not None and shape.dim() == 4 and len(stride) == 2 and len(padding) == 2


@dataclass(frozen=True)
class Int8ConvRewrite:
    """What rewrite_int8_convs did: the program, how many convolutions became int8 im2col +
    integer matmul, how many depthwise ones integer tap sums (rewrite_int8_depthwise.py), of
    how many convolutions."""
    program: torch.export.ExportedProgram
    im2col: int
    depthwise: int
    total: int


def rewrite_int8_convs(program: torch.export.ExportedProgram, unsigned: bool = False
                       ) -> Int8ConvRewrite:
    """The program with its quantized convolutions as int8 im2col + integer linear and its
    quantized depthwise convolutions as integer tap sums. `unsigned`: the `u8` form (module
    docstring): uint8 patches, per-tensor matmuls with rows × cout epilogue constants, one-row
    int8 linears on two rows."""
    # (imported here: the depthwise rewrite uses this module's helpers)
    from edgekit.pipeline.rewrite_int8_depthwise import is_int8_depthwise, rewrite_depthwise
    gm = program.module()
    convs = [n for n in gm.graph.nodes if n.op == "call_function"
             and n.target is torch.ops.aten.conv2d.default]
    chosen = [n for n in convs if _convertible(n)]
    depthwise = [n for n in convs if is_int8_depthwise(n)]
    rows = [n for n in gm.graph.nodes if _single_row_linear(n)
            and _zeros(gm, n.args[1].args[2])] if unsigned else []
    if not chosen and not rows and not depthwise:
        # no convolution to rewrite (a transformer, an MLP): its quantize steps still take
        # the cheap rounding (transformer block, host, fastest calls: each layer norm +
        # quantize 1.18 -> 0.79 us, softmax + quantize 1.94 -> 1.47, the GELU linear's
        # epilogue 3.30 -> 2.69, each attention operand's quantize 0.46 -> 0.12; whole block
        # 1.16x -> 1.07x its fp32 build, bench/quantization_flags.py)
        if _fast_quantize(gm):
            return Int8ConvRewrite(reexported(gm), 0, 0, len(convs))
        return Int8ConvRewrite(program, 0, 0, len(convs))
    for node in chosen:
        _rewrite(gm, node, unsigned)
    for node in depthwise:
        rewrite_depthwise(gm, node, _value)
    for node in rows:
        _two_rows(gm, node)
    _sink_nchw_permutes(gm)
    _fast_quantize(gm)
    return Int8ConvRewrite(reexported(gm), len(chosen), len(depthwise), len(convs))


def int8_convs_as_matmul(program: torch.export.ExportedProgram, unsigned: bool = False
                         ) -> tuple[torch.export.ExportedProgram, int, int]:
    """(rewrite_int8_convs's program, how many convolutions became im2col + integer matmul,
    how many convolutions it had)."""
    done = rewrite_int8_convs(program, unsigned)
    return done.program, done.im2col, done.total


def reexported(gm: torch.fx.GraphModule) -> torch.export.ExportedProgram:
    """A rewritten graph module exported again (dead nodes gone), with zero example inputs of
    its placeholders' shapes and dtypes."""
    gm.graph.eliminate_dead_code()
    gm.recompile()
    args = tuple(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        examples = tuple(torch.zeros(a.shape, dtype=a.dtype) for a in args)
    return torch.export.export(gm, examples, strict=False)


def _rewrite(gm: torch.fx.GraphModule, conv, unsigned: bool) -> None:
    q, aten = _ops(), torch.ops.aten
    args = list(conv.args) + [None] * (7 - len(conv.args))
    dq_x, dq_w, bias = args[0], args[1], args[2]
    stride, padding = list(args[3] or [1, 1]), list(args[4] or [0, 0])
    xq, x_scale, x_zp, x_min, x_max, x_dtype = dq_x.args[:6]
    wq, w_scales, w_zps, _, w_min, w_max, w_dtype = dq_w.args[:7]
    n, c, h, w = dq_x.meta["val"].shape
    cout, cin, kh, kw = dq_w.meta["val"].shape
    (sh, sw), (ph, pw) = stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    g = gm.graph
    call = g.call_function
    # one image, channels not a multiple of 4 (an RGB input): pad them with the activation's
    # zero point and the weights with 0 (symmetric weights: dequantizes to 0), so the gather
    # moves whole int32 words
    extra = (-c) % 4 if n == 1 and _zeros(gm, w_zps) else 0
    # u8 × s8 (see _u8_linear): int8 activations, symmetric stored weights, bias stored
    unsigned = (unsigned and x_dtype == torch.int8 and isinstance(x_zp, int) and
                _zeros(gm, w_zps) and getattr(wq, "op", None) == "get_attr" and
                (bias is None or getattr(bias, "op", None) == "get_attr") and
                n * oh * ow * cout <= U8_MAX_EPILOGUE)
    with g.inserting_before(conv):
        x = call(aten.permute.default, (xq, [0, 2, 3, 1]))
        if unsigned:
            # int8 → uint8 by flipping the sign bit (= + 128); IREE fuses it into the producer
            flip = call(aten.scalar_tensor.default, (-128,), {"dtype": torch.int8})
            x = call(aten.view.dtype, (call(aten.bitwise_xor.Tensor, (x, flip)), torch.uint8))
            x_zp, x_min, x_max, x_dtype = x_zp + 128, 0, 255, torch.uint8
        if extra:
            x = call(aten.constant_pad_nd.default, (x, [0, extra], x_zp))
            c = cin = c + extra
        extra_taps = 0
        rows = n * oh * ow
        if unsigned and x_zp:
            # taps of zero points that cancel the zero point's product (see _u8_linear)
            extra_taps = _correction_taps(_value(gm, wq), x_zp, c)
        if n == 1:
            cols = _gathered(gm, conv, x, x_zp, x_dtype, (h, w, c), (kh, kw), (sh, sw),
                             (ph, pw), extra_taps)
        else:
            if ph or pw:
                # the zero point is a Python number in PT2E's per-tensor ops
                x = call(aten.constant_pad_nd.default, (x, [0, 0, pw, pw, ph, ph], x_zp))
            taps = [call(aten.slice.Tensor, (call(aten.slice.Tensor,
                                                  (x, 1, i, i + sh * (oh - 1) + 1, sh)),
                                             2, j, j + sw * (ow - 1) + 1, sw))
                    for i in range(kh) for j in range(kw)]
            if extra_taps:
                taps.append(call(aten.full.default, ([n, oh, ow, extra_taps * c], x_zp),
                                 {"dtype": x_dtype}))
            cols = call(aten.cat.default, (taps, 3)) if len(taps) > 1 else taps[0]
        if extra_taps:
            cols = call(aten.reshape.default, (cols, [rows, (kh * kw + extra_taps) * cin]))
        else:
            cols = call(aten.reshape.default, (cols, [rows, kh * kw * cin]))
        if unsigned:
            weight = _value(gm, wq).permute(0, 2, 3, 1)
            if extra:
                weight = torch.nn.functional.pad(weight, (0, extra))
            weight = weight.reshape(cout, kh * kw * cin)
            out = _u8_linear(gm, conv.name, cols, x_scale, x_zp, weight, _value(gm, w_scales),
                             _value(gm, bias) if bias is not None else None, rows,
                             extra_taps * cin)
            out = call(aten.reshape.default, (out, [n, oh, ow, cout]))
            out = call(aten.permute.default, (out, [0, 3, 1, 2]))
            conv.replace_all_uses_with(out)
            g.erase_node(conv)
            return
        dq_cols = call(q.dequantize_per_tensor.default,
                       (cols, x_scale, x_zp, x_min, x_max, x_dtype))
        wt = call(aten.permute.default, (wq, [0, 2, 3, 1]))
        if extra:
            wt = call(aten.constant_pad_nd.default, (wt, [0, extra], 0))
        w2 = call(aten.reshape.default, (wt, [cout, kh * kw * cin]))
        dq_w2 = call(q.dequantize_per_channel.default,
                     (w2, w_scales, w_zps, 0, w_min, w_max, w_dtype))
        out = call(aten.linear.default, (dq_cols, dq_w2, bias))
        out = call(aten.reshape.default, (out, [n, oh, ow, cout]))
        out = call(aten.permute.default, (out, [0, 3, 1, 2]))
    conv.replace_all_uses_with(out)
    g.erase_node(conv)


_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]

# The u8 form's per-channel epilogue is two rows × cout f32 constants (_u8_linear): fine for a
# 32×32 image (small CNN: at most 256 × 32), not for a 224×224 one — MobileNetV2-like's first
# 1×1 expansion, 12544 rows × 96, read 9.6 MB of them and its matmul (K doubled by the zero
# point's taps) took 3.16 ms against the s8 form's 0.59 ms. Larger convolutions keep the s8
# form, which makes a program's u8 form "not taken" as a whole (pipeline/rewrite.py).
U8_MAX_EPILOGUE = 32768


def _unary(node) -> bool:
    """An elementwise op of one tensor (its other arguments plain numbers and dtypes)."""
    q, aten = _ops(), torch.ops.aten
    return (node.op == "call_function" and node.target in (
        aten.relu.default, aten.relu_.default, aten.hardtanh.default, aten.clamp.default,
        q.quantize_per_tensor.default, q.dequantize_per_tensor.default) and
        not any(isinstance(a, torch.fx.Node) for a in (*node.args[1:], *node.kwargs.values())))


def _sink_nchw_permutes(gm: torch.fx.GraphModule) -> None:
    """Move each rewritten convolution's permute back to NCHW past the elementwise ops after
    it (ReLU, requantization) until it meets the next convolution's permute to NHWC (both
    go); not past a float mean (its sum in another order is not bit-identical). Left in place,
    IREE folds the pair into the matmul as a transposed output — a cout × pixels matmul whose
    activations are its right-hand operand."""
    aten, g = torch.ops.aten, gm.graph
    g.eliminate_dead_code()        # the replaced convolutions' dequantize ops: extra users
    moved = True
    while moved:
        moved = False
        for p in list(g.nodes):
            if not (_is(p, aten.permute.default) and list(p.args[1]) == _TO_NCHW and
                    len(p.users) == 1):
                continue
            (user,) = p.users
            y = p.args[0]
            if _is(user, aten.permute.default) and list(user.args[1]) == _TO_NHWC:
                user.replace_all_uses_with(y)
            elif _unary(user) and user.args[0] is p:
                with g.inserting_before(user):
                    inner = g.call_function(user.target, (y, *user.args[1:]), dict(user.kwargs))
                    outer = g.call_function(aten.permute.default, (inner, _TO_NCHW))
                user.replace_all_uses_with(outer)
            else:
                continue
            g.erase_node(user)
            g.erase_node(p)
            moved = True


def _single_row_linear(node) -> bool:
    """An integer linear of one row (a classifier head): IREE 3.13's inner-tiled data tiling
    (`--iree-llvmcpu-enable-inner-tiled`, the path with x86's u8 × s8 VNNI tiles) crashes on
    the matvec it becomes."""
    q = _ops()
    if node.target is not torch.ops.aten.linear.default:
        return False
    x, w = node.args[0], node.args[1]
    shape = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    return (_is(x, q.dequantize_per_tensor.default) and x.args[5] == torch.int8 and
            isinstance(x.args[2], int) and _is(w, q.dequantize_per_channel.default) and
            w.args[3] == 0 and w.args[0].op == "get_attr" and
            (bias is None or getattr(bias, "op", None) == "get_attr") and
            shape is not None and shape.dim() == 2 and shape.shape[0] == 1)


def _two_rows(gm: torch.fx.GraphModule, linear) -> None:
    """The row as uint8, twice (a 2-row u8 × s8 matmul, _u8_linear), then the larger of the
    two equal result rows: the same values (IREE folds a slice of the product back into a
    matvec, and its inner-tiled data tiling fails on matvecs)."""
    aten, g = torch.ops.aten, gm.graph
    dq_x, dq_w = linear.args[0], linear.args[1]
    bias = linear.args[2] if len(linear.args) > 2 else linear.kwargs.get("bias")
    xq, x_scale, x_zp = dq_x.args[:3]
    weight = _value(gm, dq_w.args[0])
    with g.inserting_before(linear):
        flip = g.call_function(aten.scalar_tensor.default, (-128,), {"dtype": torch.int8})
        xu = g.call_function(aten.view.dtype, (g.call_function(aten.bitwise_xor.Tensor,
                                                               (xq, flip)), torch.uint8))
        zp = x_zp + 128
        cols = g.call_function(aten.cat.default, ([xu, xu], 0))
        extra_k = _correction_taps(weight, zp, 1) if zp else 0
        if extra_k:
            fill = g.call_function(aten.full.default, ([2, extra_k], zp),
                                   {"dtype": torch.uint8})
            cols = g.call_function(aten.cat.default, ([cols, fill], 1))
        out = _u8_linear(gm, linear.name, cols, x_scale, zp, weight, _value(gm, dq_w.args[1]),
                         _value(gm, bias) if bias is not None else None, 2, extra_k)
        first = g.call_function(aten.amax.default, (out, [0], True))
    linear.replace_all_uses_with(first)
    g.erase_node(linear)


def _value(gm, node):
    """The tensor a get_attr node names (a stored constant), else the value itself."""
    if not isinstance(node, torch.fx.Node):
        return node
    if node.op != "get_attr":
        raise ValueError(f"not a stored constant: {node}")
    value = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    return value


def _correction_taps(wq: torch.Tensor, zp: int, c: int) -> int:
    """How many taps of `c` weights in [-127, 127] hold -(each output channel's weight sum)."""
    sums = wq.to(torch.int64).flatten(1).sum(1).abs().max().item()
    return -(-int(sums) // (127 * c)) if sums else 0


def _u8_linear(gm, name, cols, x_scale, x_zp, weight, w_scales, bias, rows, extra_k=0):
    """uint8 patches (rows × K) times int8 `weight` (cout × K) as IREE's inner-tiled
    data tiling can take it (x86: `vpdpbusd`, u8 × s8): its per-channel epilogue fused into
    the matmul's dispatch must not broadcast a vector (IREE 3.13 fails to materialize such an
    elementwise op), so the matmul is per-tensor (weight scale 1, zero points 0) and the
    per-channel scale and bias follow as rows × cout constants — the same float operations
    in the same order as the per-channel form: (acc − zp·Σw)·s_x·s_w + b.

    A nonzero activation zero point: the patches end with taps of the zero point whose
    weights are −Σw split into int8 pieces, so the integer sum itself subtracts zp·Σw."""
    q, aten, g = _ops(), torch.ops.aten, gm.graph
    cout, k = weight.shape
    if x_zp:
        total = -weight.to(torch.int64).sum(1)                      # per output channel
        weight = torch.cat([weight, _pieces(total, extra_k)], 1)
    qkey = f"_edgekit_u8_{name}"
    gm.register_buffer(qkey + "_w", weight.to(torch.int8).contiguous())
    gm.register_buffer(qkey + "_s", w_scales.to(torch.float32).reshape(1, cout)
                       .expand(rows, cout).contiguous())
    if bias is not None:
        gm.register_buffer(qkey + "_b", bias.to(torch.float32).reshape(1, cout)
                           .expand(rows, cout).contiguous())
    dq_cols = g.call_function(q.dequantize_per_tensor.default,
                              (cols, x_scale, 0, 0, 255, torch.uint8))
    dq_w = g.call_function(q.dequantize_per_tensor.default,
                           (g.get_attr(qkey + "_w"), 1.0, 0, -127, 127, torch.int8))
    out = g.call_function(aten.linear.default, (dq_cols, dq_w))
    out = g.call_function(aten.mul.Tensor, (out, g.get_attr(qkey + "_s")))
    if bias is not None:
        out = g.call_function(aten.add.Tensor, (out, g.get_attr(qkey + "_b")))
    return out


def _pieces(total: torch.Tensor, k: int) -> torch.Tensor:
    """cout × k int8 weights, each row summing to `total`'s (|total| ≤ 127·k)."""
    cout = total.shape[0]
    out = torch.zeros(cout, k, dtype=torch.int64)
    rest = total.clone()
    for j in range(k):
        step = rest.clamp(-127, 127)
        out[:, j] = step
        rest -= step
    if rest.any():   # _correction_taps sizes k for exactly this: a bug if it does not hold
        raise LoweringError(f"{k} zero-point correction taps cannot hold a weight sum of "
                            f"{int(total.abs().max())}", stage="rewrite")
    return out


def _zeros(gm, node) -> bool:
    """Whether a per-channel zero-point operand is a stored all-zero tensor."""
    if not (isinstance(node, torch.fx.Node) and node.op == "get_attr"):
        return False
    value = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return isinstance(value, torch.Tensor) and not bool(value.any())


def _gathered(gm, conv, x, zp, dtype, hwc, kernel, stride, padding, extra_taps=0):
    """One image's patches as ONE gather of pixel rows: the channels-last pixels as rows
    (h·w, c) plus a row of zero points for the padding, indexed by a constant. Unlike pad +
    slices + concatenation (a copy dispatch per tap), the rows stay 2-D, so IREE cancels the
    previous layer's reshape into NCHW against this one's and keeps its matmul a matmul (a
    4-D output would make it a 'matmul_like' contraction that data tiling skips)."""
    aten = torch.ops.aten
    (h, w, c), (kh, kw), (sh, sw), (ph, pw) = hwc, kernel, stride, padding
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    oy, ox, i, j = torch.meshgrid(torch.arange(oh), torch.arange(ow), torch.arange(kh),
                                  torch.arange(kw), indexing="ij")
    y, xx = oy * sh - ph + i, ox * sw - pw + j
    inside = (y >= 0) & (y < h) & (xx >= 0) & (xx < w)
    index = torch.where(inside, y * w + xx, torch.full_like(y, h * w)).reshape(oh * ow, -1)
    if extra_taps:                 # the zero-point row, `extra_taps` more times per pixel
        index = torch.cat([index, torch.full((oh * ow, extra_taps), h * w)], 1)
    index = index.reshape(-1)
    name = f"_edgekit_im2col_{conv.name}"
    gm.register_buffer(name, index.contiguous())
    g = gm.graph
    rows = g.call_function(aten.reshape.default, (x, [h * w, c]))
    pad = g.call_function(aten.full.default, ([1, c], zp), {"dtype": dtype})
    rows = g.call_function(aten.cat.default, ([rows, pad], 0))
    if c % 4:
        return g.call_function(aten.index_select.default, (rows, 0, g.get_attr(name)))
    # four (eight) channels per int32 (int64): IREE copies a gathered row element by element
    words = g.call_function(aten.view.dtype, (rows, torch.int64 if c % 8 == 0 else torch.int32))
    picked = g.call_function(aten.index_select.default, (words, 0, g.get_attr(name)))
    return g.call_function(aten.view.dtype, (picked, dtype))


_ROUNDER = 12582912.0     # 1.5 * 2**23: (t + it) - it rounds |t| < 2**22 half to even in f32


def _fast_quantize(gm: torch.fx.GraphModule) -> int:
    """Each per-tensor quantize as PyTorch defines it — clamp(round(x * (1/scale)) + zp) —
    with the rounding as adding and subtracting 1.5·2²³ after the clamp (exact for the
    clamped range) instead of IREE's: a division by the scale and a bit-by-bit round half to
    even (~30 vector instructions an element in each requantizing matmul's epilogue)."""
    q, aten, g = _ops(), torch.ops.aten, gm.graph
    done = 0
    for node in list(g.nodes):
        if not _is(node, q.quantize_per_tensor.default):
            continue
        x, scale, zp, qmin, qmax, dtype = node.args[:6]
        # exact while the clamped range stays within ±2²² (8- and 16-bit types)
        if not (isinstance(scale, float) and isinstance(zp, int) and
                max(abs(qmin - zp), abs(qmax - zp)) < 2 ** 22):
            continue
        call = g.call_function
        with g.inserting_before(node):
            inv = float(torch.tensor(1.0 / scale, dtype=torch.float32))
            t = call(aten.mul.Tensor, (x, inv))
            t = call(aten.clamp.default, (t, float(qmin - zp), float(qmax - zp)))
            t = call(aten.sub.Tensor, (call(aten.add.Tensor, (t, _ROUNDER)), _ROUNDER))
            if zp:
                t = call(aten.add.Tensor, (t, float(zp)))
            out = call(aten._to_copy.default, (t,), {"dtype": dtype})
        node.replace_all_uses_with(out)
        g.erase_node(node)
        done += 1
    return done
