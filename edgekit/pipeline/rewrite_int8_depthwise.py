"""Quantized depthwise convolutions as a sum of integer taps, vectorised over channels (issue 37).

IREE 3.13 compiles a PT2E int8 depthwise convolution (`conv2d(dequantize(xq),
dequantize_per_channel(wq), b, groups=C)`) as a direct `conv_..._i8xi8xi32` whose inner loop
is scalar: MobileNetV2-like int8 on host, 1 thread, per dispatch — the 112×112×32 depthwise
3×3 2.07 ms (1.7 GMAC/s), its 17 depthwise convolutions ~14 of the module's 20 ms, which made
the int8 build 1.7× slower than fp32. Im2col does not help (a depthwise convolution is C
independent 1-channel filters: a matmul of K = 9).

So each one becomes what it computes, channels last: the int8 activations padded with their
zero point, the kh·kw shifted windows (strided slices), each widened to int32 and multiplied by
that tap's int32 weights per channel, summed; minus zero point × each channel's weight sum; then
× (activation scale × the channel's weight scale) + bias in float. One elementwise dispatch in
IREE, vectorised across channels. Integer sums are exact, so the only change from the
dequantized float convolution is one rounding at the end instead of one per product.
"""

from __future__ import annotations

import torch

from edgekit.pipeline.rewrite_int8 import _is, _ops


def is_int8_depthwise(node) -> bool:
    """A PT2E int8 depthwise 2-D convolution (per-tensor int8 activations with a plain zero
    point, per-channel symmetric stored weights of shape C×1×kh×kw, no dilation)."""
    q = _ops()
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and
            node.target is torch.ops.aten.conv2d.default):
        return False
    args = list(node.args) + [None] * (7 - len(node.args))
    x, w, bias = args[0], args[1], args[2]
    stride, padding, dilation, groups = (args[3] or [1, 1], args[4] or [0, 0],
                                         args[5] or [1, 1], args[6] or 1)
    if not (_is(x, q.dequantize_per_tensor.default) and isinstance(x.args[2], int) and
            x.args[5] in (torch.int8, torch.uint8) and
            _is(w, q.dequantize_per_channel.default) and w.args[3] == 0 and
            getattr(w.args[0], "op", None) == "get_attr" and
            getattr(w.args[1], "op", None) == "get_attr" and
            (bias is None or getattr(bias, "op", None) == "get_attr")):
        return False
    if isinstance(padding, str) or list(dilation) != [1, 1] or len(stride) != 2:
        return False
    xs, ws = x.meta.get("val"), w.meta.get("val")
    return (xs is not None and ws is not None and xs.dim() == 4 and ws.dim() == 4 and
            groups == xs.shape[1] == ws.shape[0] and ws.shape[1] == 1)


def rewrite_depthwise(gm: torch.fx.GraphModule, conv, value) -> None:
    """Replace `conv` (is_int8_depthwise) by the tap sum; `value(gm, node)` reads a stored
    constant. Its output is NCHW float as the convolution's was, through one permute from
    NHWC that the caller's permute sinking moves past the ReLU and requantization."""
    aten = torch.ops.aten
    args = list(conv.args) + [None] * (7 - len(conv.args))
    dq_x, dq_w, bias = args[0], args[1], args[2]
    (sh, sw), (ph, pw) = list(args[3] or [1, 1]), list(args[4] or [0, 0])
    xq, x_scale, x_zp = dq_x.args[:3]
    n, c, h, w = dq_x.meta["val"].shape
    kh, kw = dq_w.meta["val"].shape[2:]
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    weight = value(gm, dq_w.args[0]).to(torch.int32).reshape(c, kh, kw)
    scales = value(gm, dq_w.args[1]).to(torch.float32)
    zero_point_sum = x_zp * weight.sum((1, 2))                        # per channel
    multiplier = (x_scale * scales.to(torch.float64)).to(torch.float32)
    constants = {"w": weight.permute(1, 2, 0).contiguous(),           # kh × kw × C
                 "zsum": zero_point_sum.contiguous(), "scale": multiplier.contiguous()}
    if bias is not None:
        constants["bias"] = value(gm, bias).to(torch.float32).contiguous()
    g = gm.graph
    names = {}
    for key, tensor in constants.items():
        names[key] = f"_edgekit_dw_{conv.name}_{key}"
        gm.register_buffer(names[key], tensor)
    with g.inserting_before(conv):
        call = g.call_function
        x = call(aten.permute.default, (xq, [0, 2, 3, 1]))              # N H W C, int8
        if ph or pw:
            x = call(aten.constant_pad_nd.default, (x, [0, 0, pw, pw, ph, ph], x_zp))
        w_all = g.get_attr(names["w"])
        acc = None
        for i in range(kh):
            rows = call(aten.slice.Tensor, (x, 1, i, i + sh * (oh - 1) + 1, sh))
            for j in range(kw):
                tap = call(aten.slice.Tensor, (rows, 2, j, j + sw * (ow - 1) + 1, sw))
                # widened per tap: widening the padded input once (9 uses) makes IREE keep
                # the whole int32 image on the dispatch's stack (MobileNetV2: 4.99 MB)
                tap = call(aten._to_copy.default, (tap,), {"dtype": torch.int32})
                w_ij = call(aten.select.int, (call(aten.select.int, (w_all, 0, i)), 0, j))
                term = call(aten.mul.Tensor, (tap, w_ij))
                acc = term if acc is None else call(aten.add.Tensor, (acc, term))
        acc = call(aten.sub.Tensor, (acc, g.get_attr(names["zsum"])))
        out = call(aten.mul.Tensor, (call(aten._to_copy.default, (acc,),
                                          {"dtype": torch.float32}),
                                     g.get_attr(names["scale"])))
        if bias is not None:
            out = call(aten.add.Tensor, (out, g.get_attr(names["bias"])))
        out = call(aten.permute.default, (out, [0, 3, 1, 2]))
    conv.replace_all_uses_with(out)
    g.erase_node(conv)
