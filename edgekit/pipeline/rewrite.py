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

`--edgekit-im2col-convs=all|0,3,5-9`: the same rewrite for the convolutions named by their order
in the exported graph (from 0), any kernel and stride (groups 1): the per-convolution choice
that `edgekit tune --conv-choice` makes from each convolution's dispatch time in IREE's HAL
profile (tune/conv_choice.py). With `convs-as-matmul` too, a convolution either names goes.

`--edgekit-pointwise-as-matmul=on`: every 1x1 convolution (groups 1) channels-last with its
weight as a (cin x cout) constant. IREE runs a 1x1 convolution as a contraction with the weight
as TOSA/PyTorch store it, (cout x cin), so each register tile of output channels loads its
weights across rows; as (cin x cout) they are one contiguous load. A convolution whose result
the next one pads becomes a multiply-and-sum (_pointwise_into_padding), the others a matmul.
MobileNetV2-like (AVX-512, 1 thread, HAL profile, without data tiling): its expand convolutions
120-160 -> 200-215 GFLOP/s, its depthwise convolutions (no longer fused with data tiling's packs)
1.15 -> 0.43 ms; in process 9-11 % faster than its best flag set (fold-batchnorm+data-tiling).

`--edgekit-fold-batchnorm=on`: eval-mode BatchNorm after a convolution is folded into the
convolution's weight and bias (w·γ/√(σ²+ε), (b−μ)·γ/√(σ²+ε)+β), so no per-channel scale and
shift is left to compute at run time.

`--edgekit-int8-convs-as-matmul=on|u8` (int8 builds only): pipeline/rewrite_int8.py; `u8`
without IREE's inner-tiled flag takes the u8 form only where every contraction does, and then
adds that flag (int8_as_matmul; the contraction census: pipeline/rewrite_int8_matmul.py).

`--edgekit-softmax-by-columns=N`: a last-dimension softmax with at least N rows computed over
its transpose (pipeline/rewrite_softmax.py says why and what it measured).

Always, asked for or not (float models): integer/boolean tensors computed from constants
alone folded into constants, and comparisons of a float tensor with a Python float made in the
tensor's dtype instead of float64 — both exact (pipeline/rewrite_tosa.py), so transformers
lower through TOSA.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from edgekit.config.edgekit_flags import PREFIX, conv_selection, parse_edgekit_flags
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.rewrite_tosa import legalise_for_tosa
from edgekit.pipeline.rewrite_softmax import (count_softmax, scores_by_columns,
                                             softmax_by_columns, softmax_rewritten)


def rewrite_graph(exported: ExportedModel[torch.export.ExportedProgram],
                  flags: tuple[str, ...]) -> ExportedModel[torch.export.ExportedProgram]:
    options = parse_edgekit_flags(flags)  # the recipe and profile were checked on loading
    program, notes = exported.program, []
    if options.get("fold-batchnorm") == "on":
        program, folded, total = fold_batchnorm(program)
        notes.append(f"{folded} of {total} BatchNorms folded into their convolutions "
                     f"({PREFIX}fold-batchnorm=on)")
    max_pixels = options.get("convs-as-matmul")
    selection = options.get("im2col-convs")
    pointwise = options.get("pointwise-as-matmul")
    if max_pixels is not None or selection is not None or pointwise is not None:
        aten = torch.ops.aten
        before = sum(_count(program, op) for op in _conv_ops())
        chosen = conv_selection(selection) if selection is not None else frozenset()
        into_padding = frozenset(i for i, node in enumerate(_conv_nodes(program))
                                 if _feeds_padding(node)) if pointwise == "on" else frozenset()
        decompose = _conv_as_matmul(max_pixels, chosen, before, pointwise == "on", into_padding)
        program = program.run_decompositions({op: decompose for op in _conv_ops()})
        rewritten = before - _count(program, aten.convolution.default)
        how = ", ".join(f"{PREFIX}{k}={v}" for k, v in (("convs-as-matmul", max_pixels),
                                                          ("im2col-convs", selection),
                                                          ("pointwise-as-matmul", pointwise))
                        if v is not None)
        notes.append(f"{rewritten} of {before} convolutions as im2col + matmul ({how})")
    quantized = exported.quantization is not None and exported.quantization.mode == "int8"
    as_matmul = options.get("int8-convs-as-matmul")
    compile_flags: tuple[str, ...] = ()
    if as_matmul in ("on", "u8") and quantized:
        program, said, compile_flags = int8_as_matmul(program, str(as_matmul),
                                                      INNER_TILED in flags)
        notes.extend(said)
    min_rows = options.get("softmax-by-columns")
    if min_rows is not None:
        softmax = {torch.ops.aten.softmax.int: softmax_by_columns(min_rows)}
        program = scores_by_columns(program, min_rows).run_decompositions(softmax)
        notes.append(f"{softmax_rewritten(exported.program, min_rows)} of "
                     f"{count_softmax(exported.program)} softmax by columns "
                     f"({PREFIX}softmax-by-columns={min_rows})")
    # not asked for: exact, and what lets transformers lower through TOSA (rewrite_tosa.py);
    # not for int8, whose only lowering is torch and whose quantized weights must stay ops
    if not quantized:
        program, legalised = legalise_for_tosa(program, exported.samples)
        notes.extend(legalised)
    if not notes:
        return exported
    return dataclasses.replace(exported, program=program, rewrites=(*exported.rewrites, *notes),
                               compile_flags=(*exported.compile_flags, *compile_flags))


INNER_TILED = "--iree-llvmcpu-enable-inner-tiled"


def int8_as_matmul(program: torch.export.ExportedProgram, form: str, inner_tiled: bool
                   ) -> tuple[torch.export.ExportedProgram, list[str], tuple[str, ...]]:
    """(program, notes, compile flags it needs) for `--edgekit-int8-convs-as-matmul=FORM`.

    `u8` with the inner-tiled flag among the build's: the u8 form wherever it applies (the
    recipe asked for that path). `u8` alone (`host`'s int8 default): the u8 form only when
    EVERY contraction of the program takes it (a linear: from DEFAULT_MIN_ROWS rows, or one
    row) — then `--iree-llvmcpu-enable-inner-tiled` is
    added, which puts u8 × s8 on VNNI's vpdpbusd; else the `on` form, without it (IREE 3.13's
    inner-tiled path fails on s8 matmuls with per-channel epilogues and on batch matmuls:
    pipeline/rewrite_int8_matmul.py)."""
    from edgekit.pipeline.rewrite_int8 import rewrite_int8_convs
    how = f"({PREFIX}int8-convs-as-matmul={form})"
    said: list[str] = []
    if form == "u8":
        from edgekit.pipeline.rewrite_int8_matmul import (DEFAULT_MIN_ROWS, contraction_forms,
                                                          u8_linears)
        done = rewrite_int8_convs(program, unsigned=True)
        candidate, rewritten, total = done.program, done.im2col, done.total
        # by default not where it loses (a few rows); asked for, wherever it applies (the
        # inner-tiled path fails on the s8 form's per-channel epilogues)
        candidate, linears = u8_linears(candidate, 2 if inner_tiled else DEFAULT_MIN_ROWS)
        u8, others = contraction_forms(candidate)
        if inner_tiled or (u8 and not others):
            if total:
                said.append(f"{rewritten} of {total} int8 convolutions as int8 im2col + "
                            f"integer matmul {how}")
            if done.depthwise:
                said.append(_depthwise_note(done.depthwise))
            if linears:
                said.append(f"{linears} int8 linears as u8 × s8 matmuls {how}")
            if inner_tiled:
                return candidate, said, ()
            said.append(f"all {u8} contractions u8 × s8: {INNER_TILED} added")
            return candidate, said, (INNER_TILED,)
        kinds = ", ".join(sorted(set(others)))
        said.append(f"the u8 form not taken: {len(others)} of {u8 + len(others)} contractions "
                    f"have none ({kinds}); the s8 form (=on), without {INNER_TILED}")
        form = "on"
    done = rewrite_int8_convs(program)
    if done.depthwise:
        said.insert(0, _depthwise_note(done.depthwise))
    if done.total:                # a model without convolutions: nothing to say
        said.insert(0, f"{done.im2col} of {done.total} int8 convolutions as int8 im2col + "
                       f"integer matmul ({PREFIX}int8-convs-as-matmul={form})")
    return done.program, said, ()


def _depthwise_note(count: int) -> str:
    return (f"{count} int8 depthwise convolutions as integer tap sums over channels "
            f"(IREE's direct int8 depthwise convolution is scalar)")


@dataclass(frozen=True)
class ConvShape:
    """One 2-D convolution of the exported graph: what IREE's dispatch names carry."""
    index: int            # its order among the graph's convolutions (im2col-convs' numbering)
    cout: int
    oh: int
    ow: int
    cin: int              # per group
    kh: int
    kw: int
    groups: int

    @property
    def im2col_ok(self) -> bool:
        return self.groups == 1


def conv_shapes(program: torch.export.ExportedProgram) -> list[ConvShape]:
    """The graph's aten.conv2d nodes in order, with static shapes (others are skipped but
    keep their index)."""
    out = []
    for i, node in enumerate(_conv_nodes(program)):
        result, weight = node.meta.get("val"), node.args[1].meta.get("val")
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        dims = (*getattr(result, "shape", ()), *getattr(weight, "shape", ()))
        if len(dims) != 8 or not all(isinstance(d, int) for d in dims):
            continue
        _, _, oh, ow, cout, cin, kh, kw = dims
        out.append(ConvShape(i, cout, oh, ow, cin, kh, kw, groups))
    return out


def fold_batchnorm(program: torch.export.ExportedProgram
                   ) -> tuple[torch.export.ExportedProgram, int, int]:
    """(a copy of `program` with eval-mode BatchNorms folded into the convolution that feeds
    them, how many were folded, how many there were). A BatchNorm folds when its input is a
    convolution used by nothing else and every tensor involved is a parameter or buffer used
    only there; the convolution's new bias reuses the BatchNorm's shift parameter."""
    aten = torch.ops.aten
    program = copy.deepcopy(program)
    sig = program.graph_signature
    state = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    norms = [n for n in program.graph.nodes if n.target is aten.batch_norm.default]
    folded = 0
    for bn in norms:
        conv, gamma, beta, mean, var, training, _, eps, _ = bn.args
        if training or conv.target not in _conv_ops() or len(conv.users) != 1:
            continue
        weight = conv.args[1]
        bias = conv.args[2] if len(conv.args) > 2 else conv.kwargs.get("bias")
        params = [weight, gamma, beta, mean, var, *([bias] if bias is not None else [])]
        if any(getattr(p, "op", None) != "placeholder" or p.name not in state
               or len(p.users) != 1 for p in params):
            continue
        value = {p: program.state_dict[state[p.name]] for p in params}
        scale = value[gamma] / torch.sqrt(value[var] + eps)
        shift = value[beta] - value[mean] * scale
        if bias is not None:
            shift = shift + value[bias] * scale
        with torch.no_grad():
            program.state_dict[state[weight.name]] = torch.nn.Parameter(
                value[weight] * scale.reshape(-1, 1, 1, 1), requires_grad=False)
            program.state_dict[state[beta.name]] = torch.nn.Parameter(shift,
                                                                      requires_grad=False)
        args = list(conv.args) + [None] * (3 - len(conv.args))
        args[2] = beta
        conv.args = tuple(args)
        conv.kwargs = {k: v for k, v in conv.kwargs.items() if k != "bias"}
        bn.replace_all_uses_with(conv)
        program.graph.erase_node(bn)
        folded += 1
    program.graph_module.recompile()
    return program, folded, len(norms)


# conv2d's two overloads in torch.export's graph: numeric padding, and "same"/"valid"
# (MobileNetV2-like's stride-1 convolutions)
def _conv_ops():
    aten = torch.ops.aten
    return (aten.conv2d.default, aten.conv2d.padding)


def _count(program: torch.export.ExportedProgram, op) -> int:
    return sum(1 for n in program.graph.nodes if n.target is op)


def _conv_as_matmul(max_pixels: int | None, chosen: frozenset[int] | None, convs: int,
                    pointwise: bool = False, into_padding: frozenset[int] = frozenset()):
    """conv2d's decomposition: im2col + matmul where asked, else the convolution as it is.
    `chosen`: the indices to rewrite (None: all); `pointwise`: every 1x1 convolution too,
    those in `into_padding` as a channels-last multiply-and-sum (_pointwise_into_padding).
    run_decompositions traces the graph in order, twice in torch 2.13, so call k is
    convolution k modulo the graph's `convs`."""
    import torch.nn.functional as F
    aten = torch.ops.aten
    seen = [0]

    def conv2d(input, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1),
               groups=1):
        index = seen[0] % convs
        seen[0] += 1
        if isinstance(padding, str):    # "same" (stride 1) / "valid": as explicit padding
            input, padding = _explicit_padding(input, weight, padding, dilation)

        def unchanged():
            return aten.convolution.default(input, weight, bias, stride, padding, dilation,
                                            False, (0, 0), groups)
        shapes = (*input.shape, *weight.shape)
        if groups != 1 or input.dim() != 4 or not all(isinstance(d, int) for d in shapes):
            return unchanged()  # grouped/depthwise, dynamic shapes: as they are
        n, c, h, w = input.shape
        cout, cin, kh, kw = weight.shape
        (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
        oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        by_size = max_pixels is not None and (kh, kw) != (1, 1) and oh * ow <= max_pixels
        by_kernel = pointwise and (kh, kw) == (1, 1)
        if not by_size and not by_kernel and not (chosen is None or index in chosen):
            return unchanged()
        if by_kernel and index in into_padding and (sh, sw) == (1, 1) and not (ph or pw):
            return _pointwise_into_padding(input, weight, bias)
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


def _pointwise_into_padding(input, weight, bias):
    """A 1x1 convolution as sum over cin of x[..., cin, None] * w[cin, :], channels-last. IREE
    fuses the product into the sum: one 4-D contraction (h, w, cout, cin) with a (cin x cout)
    weight, whose result the next convolution's padding is written into in the same dispatch.
    As a matmul the pixels are collapsed into one dimension first, and the padded copy is a
    dispatch of its own (MobileNetV2-like: nine copies, 0.36 ms of 5)."""
    cout, cin = weight.shape[:2]
    x = input.permute(0, 2, 3, 1).unsqueeze(-1)
    out = (x * weight.reshape(cout, cin).t().reshape(1, 1, 1, cin, cout)).sum(dim=3)
    if bias is not None:
        out = out + bias
    return out.permute(0, 3, 1, 2)


def _conv_nodes(program: torch.export.ExportedProgram) -> list:
    return [n for n in program.graph.nodes if n.target in _conv_ops()]


def _layout_keeping():
    """Per-element ops between a convolution and the next (BatchNorm, activations)."""
    aten = torch.ops.aten
    return (aten.batch_norm.default, aten._native_batch_norm_legit_no_training.default,
            aten.hardtanh.default, aten.relu.default, aten.clamp.default, aten.silu.default,
            aten.hardswish.default, aten.gelu.default, aten.sigmoid.default)


def _feeds_padding(conv) -> bool:
    """The convolution's result reaches, through per-element ops only, a padding: an explicit
    pad or a convolution that pads its input (a depthwise 3x3 after an expanding 1x1)."""
    aten = torch.ops.aten
    node = conv
    while len(node.users) == 1:
        (user,) = node.users
        if user.target in (aten.constant_pad_nd.default, aten.pad.default):
            return True
        if user.target in _conv_ops():
            return user.args[0] is node and _pads_input(user)
        if user.target not in _layout_keeping():
            return False
        node = user
    return False


def _pads_input(conv) -> bool:
    padding = conv.args[4] if len(conv.args) > 4 else conv.kwargs.get("padding", 0)
    if isinstance(padding, str):      # "same" pads only for a kernel larger than 1
        return padding == "same" and any(k > 1 for k in conv.args[1].meta["val"].shape[2:])
    return any(p != 0 for p in (padding if isinstance(padding, (list, tuple)) else (padding,)))


def _explicit_padding(input, weight, padding: str, dilation):
    """(input, numeric padding) equal to conv2d's "same"/"valid": symmetric where the total is
    even, else the odd pixel padded on the input (PyTorch puts it at the end)."""
    import torch.nn.functional as F
    if padding == "valid":
        return input, (0, 0)
    totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    if all(t % 2 == 0 for t in totals):
        return input, tuple(t // 2 for t in totals)
    (th, tw) = totals
    return F.pad(input, (tw // 2, tw - tw // 2, th // 2, th - th // 2)), (0, 0)
