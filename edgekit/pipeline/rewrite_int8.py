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
dilated or dynamically shaped convolutions are left as they are.
"""

from __future__ import annotations

import torch

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


def int8_convs_as_matmul(program: torch.export.ExportedProgram
                         ) -> tuple[torch.export.ExportedProgram, int, int]:
    """(the program with its quantized convolutions as int8 im2col + integer linear, how many
    were rewritten, how many convolutions it had)."""
    gm = program.module()
    convs = [n for n in gm.graph.nodes if n.op == "call_function"
             and n.target is torch.ops.aten.conv2d.default]
    chosen = [n for n in convs if _convertible(n)]
    if not chosen:
        return program, 0, len(convs)
    for node in chosen:
        _rewrite(gm, node)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    args = tuple(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        examples = tuple(torch.zeros(a.shape, dtype=a.dtype) for a in args)
    return torch.export.export(gm, examples, strict=False), len(chosen), len(convs)


def _rewrite(gm: torch.fx.GraphModule, conv) -> None:
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
    with g.inserting_before(conv):
        x = call(aten.permute.default, (xq, [0, 2, 3, 1]))
        if extra:
            x = call(aten.constant_pad_nd.default, (x, [0, extra], x_zp))
            c = cin = c + extra
        if n == 1:
            cols = _gathered(gm, conv, x, x_zp, (h, w, c), (kh, kw), (sh, sw), (ph, pw))
        else:
            if ph or pw:
                # the zero point is a Python number in PT2E's per-tensor ops
                x = call(aten.constant_pad_nd.default, (x, [0, 0, pw, pw, ph, ph], x_zp))
            taps = [call(aten.slice.Tensor, (call(aten.slice.Tensor,
                                                  (x, 1, i, i + sh * (oh - 1) + 1, sh)),
                                             2, j, j + sw * (ow - 1) + 1, sw))
                    for i in range(kh) for j in range(kw)]
            cols = call(aten.cat.default, (taps, 3)) if len(taps) > 1 else taps[0]
        cols = call(aten.reshape.default, (cols, [n * oh * ow, kh * kw * cin]))
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


def _zeros(gm, node) -> bool:
    """Whether a per-channel zero-point operand is a stored all-zero tensor."""
    if not (isinstance(node, torch.fx.Node) and node.op == "get_attr"):
        return False
    value = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    return isinstance(value, torch.Tensor) and not bool(value.any())


def _gathered(gm, conv, x, zp, hwc, kernel, stride, padding):
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
    index = torch.where(inside, y * w + xx, torch.full_like(y, h * w)).reshape(-1)
    name = f"_edgekit_im2col_{conv.name}"
    gm.register_buffer(name, index.contiguous())
    g = gm.graph
    rows = g.call_function(aten.reshape.default, (x, [h * w, c]))
    pad = g.call_function(aten.full.default, ([1, c], zp),
                          {"dtype": conv.args[0].args[5]})
    rows = g.call_function(aten.cat.default, ([rows, pad], 0))
    if c % 4:
        return g.call_function(aten.index_select.default, (rows, 0, g.get_attr(name)))
    # four (eight) channels per int32 (int64): IREE copies a gathered row element by element
    words = g.call_function(aten.view.dtype, (rows, torch.int64 if c % 8 == 0 else torch.int32))
    picked = g.call_function(aten.index_select.default, (words, 0, g.get_attr(name)))
    return g.call_function(aten.view.dtype, (picked, torch.int8))
