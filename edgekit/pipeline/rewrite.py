"""Stage `rewrite` for PyTorch models: graph-level rewrites of the exported program before
lowering (the PyTorch frontend's; ONNX models are lowered as they come).

They are asked for by edgekit's own options in the compile flags (`--edgekit-…`,
config/edgekit_flags.py), so a tune flag set can pair a rewrite with the IREE flags it needs and
the tuned choice carries both; iree-compile never sees them. The model's identity (digest) and
golden outputs stay the original model's: validation checks the rewritten module against the
model as written.

`--edgekit-convs-as-matmul=N`: 2-D convolutions (groups 1, kernel larger than 1x1) whose output
has at most N pixels become explicit im2col + matmul, channels-last. Measured with IREE's profiler
(`bench/dispatch_profile.py`, ResNet18-like, 1 thread, this machine): IREE's direct convolution
reaches 123–139 GFLOP/s on 56² and 28² outputs but only 30 on 7² and 50 on 14²; as matmuls with
data tiling those layers run at 60 and 99 GFLOP/s, and the module takes 49 ms instead of 69 ms.

`--edgekit-softmax-by-columns=N`: a last-dimension softmax with at least N rows computed over
its transpose (pipeline/rewrite_softmax.py says why and what it measured).
"""

from __future__ import annotations

import dataclasses

import torch

from edgekit.config.edgekit_flags import PREFIX, parse_edgekit_flags
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.rewrite_softmax import (count_softmax, scores_by_columns,
                                             softmax_by_columns, softmax_rewritten)


def rewrite_graph(exported: ExportedModel[torch.export.ExportedProgram],
                  flags: tuple[str, ...]) -> ExportedModel[torch.export.ExportedProgram]:
    options = parse_edgekit_flags(flags)  # the recipe and profile were checked on loading
    max_pixels = options.get("convs-as-matmul")
    min_rows = options.get("softmax-by-columns")
    if max_pixels is None and min_rows is None:
        return exported
    aten = torch.ops.aten
    table, notes = {}, []
    if max_pixels is not None:
        table[aten.conv2d.default] = _conv_as_matmul(max_pixels)
    if min_rows is not None:
        table[aten.softmax.int] = softmax_by_columns(min_rows)
    program = scores_by_columns(exported.program, min_rows) if min_rows is not None else \
        exported.program
    program = program.run_decompositions(table)
    if max_pixels is not None:
        before = _count(exported.program, aten.conv2d.default)
        rewritten = before - _count(program, aten.convolution.default)
        notes.append(f"{rewritten} of {before} convolutions as im2col + matmul "
                     f"({PREFIX}convs-as-matmul={max_pixels})")
    if min_rows is not None:
        notes.append(f"{softmax_rewritten(exported.program, min_rows)} of "
                     f"{count_softmax(exported.program)} softmax by columns "
                     f"({PREFIX}softmax-by-columns={min_rows})")
    return dataclasses.replace(exported, program=program,
                               rewrites=(*exported.rewrites, *notes))


def _count(program: torch.export.ExportedProgram, op) -> int:
    return sum(1 for n in program.graph.nodes if n.target is op)


def _conv_as_matmul(max_pixels: int):
    import torch.nn.functional as F
    aten = torch.ops.aten

    def conv2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
               groups=1):
        def unchanged():
            return aten.convolution.default(input, weight, bias, stride, padding, dilation,
                                            False, (0, 0), groups)
        shapes = (*input.shape, *weight.shape)
        if isinstance(padding, str) or groups != 1 or input.dim() != 4 or \
                not all(isinstance(d, int) for d in shapes):
            return unchanged()  # "same" padding, grouped/depthwise, dynamic shapes: as they are
        n, c, h, w = input.shape
        cout, cin, kh, kw = weight.shape
        (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if (kh, kw) == (1, 1) or oh * ow > max_pixels:
            return unchanged()
        # Channels-last inside: the TOSA lowering computes convolutions in NHWC, so the
        # permutes here cancel against its own around the neighbouring convolutions, and each
        # tap is a slice with whole channel rows (NCHW im2col: 2-6% slower, extra transposes).
        x = input.permute(0, 2, 3, 1)
        if ph or pw:
            x = F.pad(x, (0, 0, pw, pw, ph, ph))
        taps = [x[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                for i in range(kh) for j in range(kw)]
        # columns ordered (kh, kw, cin): the weight as (kh, kw, cin) x cout (a constant)
        patches = torch.cat(taps, dim=3).reshape(n, oh * ow, kh * kw * c)
        out = torch.matmul(patches, weight.permute(2, 3, 1, 0).reshape(kh * kw * cin, cout))
        out = out.reshape(n, oh, ow, cout)
        if bias is not None:
            out = out + bias
        return out.permute(0, 3, 1, 2)
    return conv2d
