"""String padding to explicit ints: `conv{1,2,3}d.padding` → `conv{1,2,3}d.default`.

`nn.Conv2d(..., padding="same")` exports `aten.conv2d.padding`, which the int8 quantizer's
contractions and the int8 rewrites (pipeline/rewrite_int8.py) would otherwise have to know as
a second form of every convolution. "valid" is padding 0; "same" (stride 1 only, as PyTorch
allows) pads dilation·(kernel − 1) per spatial axis, half before and half after. An odd total
(an even kernel) pads one more after: that extra is an explicit zero `constant_pad_nd` on the
float input before the convolution, as PyTorch's own "same" does.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

_FORMS = {aten.conv1d.padding: (aten.conv1d.default, 1),
          aten.conv2d.padding: (aten.conv2d.default, 2),
          aten.conv3d.padding: (aten.conv3d.default, 3)}


def _kernel(weight: torch.fx.Node, graph: torch.fx.GraphModule, dims: int) -> list[int] | None:
    """The weight's spatial sizes, from the export's fake tensor or the parameter it reads."""
    value = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    if value is None and isinstance(weight, torch.fx.Node) and weight.op == "get_attr":
        value = getattr(graph, str(weight.target), None)
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) != dims + 2 or not all(isinstance(s, int) for s in shape):
        return None
    return list(shape[2:])


def explicit_conv_padding(graph: torch.fx.GraphModule) -> int:
    """Rewrite every string-padded convolution in place; returns how many. One whose kernel
    size is not static is left as it is (the quantizer then keeps it float)."""
    count = 0
    for node in list(graph.graph.nodes):
        form = _FORMS.get(node.target) if node.op == "call_function" else None
        if form is None:
            continue
        target, dims = form
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        defaults = (None, None, None, [1] * dims, "valid", [1] * dims, 1)
        values = dict(zip(names, defaults))
        values.update(zip(names, node.args))
        values.update(node.kwargs)
        stride, dilation = list(values["stride"]), list(values["dilation"])
        stride, dilation = stride * dims if len(stride) == 1 else stride, \
            dilation * dims if len(dilation) == 1 else dilation
        kernel = _kernel(values["weight"], graph, dims)
        if kernel is None:
            continue
        x = values["input"]
        if values["padding"] == "valid":
            before = [0] * dims
        else:  # "same": PyTorch only accepts it at stride 1
            totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
            before = [t // 2 for t in totals]
            extra = [t - 2 * b for t, b in zip(totals, before)]
            if any(extra):
                # constant_pad_nd's pairs run from the last axis: (left, right) per axis
                pairs = [p for e in reversed(extra) for p in (0, e)]
                with graph.graph.inserting_before(node):
                    x = graph.graph.call_function(aten.constant_pad_nd.default, (x, pairs, 0.0))
                    x.meta.update({k: v for k, v in node.meta.items()
                                   if k in ("nn_module_stack", "stack_trace")})
        with graph.graph.inserting_before(node):
            new = graph.graph.call_function(
                target, (x, values["weight"], values["bias"], stride, before, dilation,
                         values["groups"]))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.graph.erase_node(node)
        count += 1
    if count:
        graph.graph.lint()
        graph.recompile()
    return count
