"""Part of stage `rewrite` for PyTorch models: what torch-mlir's TOSA lowering would turn
into ops IREE's TOSA input refuses, made exactly in ops it takes (`legalise_for_tosa`). Each
change is said in the build's lowering note; a model with none of these is left as it is.

What fell back from TOSA to Linalg, and why (torch-mlir 20261001, IREE 3.13):
- every attention through `scaled_dot_product_attention` (transformers' default `sdpa`:
  BERT, DistilBERT, GPT-2, T5, Whisper, CLIP, ViT; nn.MultiheadAttention): torch's
  decomposition checks `scores == -inf`, and torch-mlir lowers `aten.eq.Scalar` of a float32
  tensor by casting it to f64 (`'tosa.cast' op is not profile-aligned: element type 'f64'`).
  Made against a 0-d constant of the tensor's dtype — exactly what eager computes: PyTorch
  compares a float32 tensor with a Python float rounded to float32 (`torch.tensor([0.1]) ==
  0.1` is True; the f64 lowering is the one that differs from eager);
- positions, masks and buckets computed from `arange` and integer buffers (BERT's token-type
  gather: `tosa.gather` of i64; T5's relative-position buckets and DeepLab's bilinear
  interpolation indices: i64→f32 `tosa.cast`): folded into constants, with eager's own
  values;
- float64 buffers that every use computes with in float32 anyway: stored as float32;
- grouped (not depthwise) convolutions of more than 31 groups (RegNetY-400MF: 55; `failed to
  legalize operation 'torch.aten.convolution'`): split into convolutions of at most 31 groups
  over channel slices, concatenated — the same sums per output channel.
"""

from __future__ import annotations

import numpy as np
import torch

from edgekit.toolchain import torch_mlir

Program = torch.export.ExportedProgram


def _comparisons() -> dict:
    """Each scalar comparison and its tensor-tensor form."""
    aten = torch.ops.aten
    return {aten.eq.Scalar: aten.eq.Tensor, aten.ne.Scalar: aten.ne.Tensor,
            aten.lt.Scalar: aten.lt.Tensor, aten.le.Scalar: aten.le.Tensor,
            aten.gt.Scalar: aten.gt.Tensor, aten.ge.Scalar: aten.ge.Tensor}


def _attention_ops() -> tuple:
    aten = torch.ops.aten
    return (aten.scaled_dot_product_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            aten._scaled_dot_product_attention_math.default,
            aten._safe_softmax.default)     # attention's softmax: where the comparison is


def _may_compare_with_a_float(program: Program) -> bool:
    """Whether the program can hold a float-scalar comparison: one written in it, or an
    attention whose decomposition makes one. Other models are not traced again (seconds on a
    large CNN)."""
    makers = {*_comparisons(), *_attention_ops()}
    return any(n.op == "call_function" and n.target in makers for n in program.graph.nodes)


def _in_tensor_dtype(scalar_op, tensor_op):
    """A decomposition of `scalar_op`: against a 0-d constant of the float tensor's dtype;
    anything else (an integer tensor, a non-float scalar) is left as it is."""
    def compare(x, other):
        if not (x.dtype.is_floating_point and isinstance(other, float)):
            return NotImplemented       # make_fx then records the op unchanged
        return tensor_op(x, torch.full((), other, dtype=x.dtype, device=x.device))
    return compare


def _against_constants(program: Program) -> int:
    """How many comparisons in the graph read a 0-d `full` constant: what the rewrite makes."""
    tensor_ops = set(_comparisons().values())
    return sum(1 for n in program.graph.nodes if n.target in tensor_ops and any(
        isinstance(a, torch.fx.Node) and a.target is torch.ops.aten.full.default
        and list(a.args[0]) == [] for a in n.args))


# A folded tensor larger than this stays computed: a constant of its size would outweigh the
# work it saves (a mask of 1M elements is 1 MiB as bool, 8 MiB as int64).
FOLD_MAX_ELEMENTS = 1 << 20


# the integer buffers that hold positions, ids and masks; int8/uint8 buffers are quantized
# weights (`quantize: {mode: int8-weights}`): folded, their dequantized copy would be stored as
# float32 — four times the module's weights
_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.bool)


def _weightless_nodes(module: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes whose values depend neither on the model's inputs nor on a weight: integer
    index buffers, and ops (deterministic, pure) of those alone or of nothing (arange,
    full) — positions, masks, interpolation indices and weights."""
    found: set[torch.fx.Node] = set()
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = _attribute(module, node.target)
            if isinstance(value, torch.Tensor) and value.dtype in _INDEX_DTYPES:
                found.add(node)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) \
                and not node.is_impure() \
                and torch.Tag.nondeterministic_seeded not in node.target.tags \
                and all(a in found for a in node.all_input_nodes):
            found.add(node)
    return found


def _folded_constants(module: torch.fx.GraphModule) -> int:
    """Each tensor of the (unlifted) module computed from integer buffers and shapes alone
    made a constant, in place; how many. Positions, relative-position buckets (T5), causal
    and padding masks from `arange` (GPT-2, BERT), token-type ids gathered from a buffer
    (BERT), bilinear interpolation's indices and weights (DeepLab): in TOSA they are i64
    arithmetic, i64 gathers and i64→f32 casts that IREE's TOSA input refuses; as constants
    they are none of those. Exact: the values are eager PyTorch's own. Computations that read
    a float weight are left as written."""
    weightless = {n for n in _weightless_nodes(module) if n.op == "call_function"
                  and isinstance(n.meta.get("val"), torch.Tensor)}
    # a tensor an in-place op changes (T5's `buckets += …`) stays computed: as a constant it
    # would be a buffer the module mutates
    mutated = {n.args[0] for n in module.graph.nodes if isinstance(
        n.target, torch._ops.OpOverload) and n.target._schema.is_mutable and n.args}
    # where one is read by what stays computed (an input's op, or math of float weights)
    folded = [n for n in module.graph.nodes if n in weightless and n not in mutated
              and n.meta["val"].numel() <= FOLD_MAX_ELEMENTS
              and any(u not in weightless for u in n.users)]
    if not folded:
        return 0
    values: dict[torch.fx.Node, object] = {}
    with torch.no_grad():
        for node in module.graph.nodes:
            if node.op == "get_attr":
                values[node] = _attribute(module, node.target)
            elif node in weightless:
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.get)
                values[node] = node.target(*args, **kwargs)
    graph = module.graph
    for i, node in enumerate(folded):
        name = f"_edgekit_folded_{i}"
        module.register_buffer(name, values[node].detach().clone(), persistent=True)
        with graph.inserting_before(node):
            attribute = graph.get_attr(name)
        attribute.meta.update(node.meta)
        node.replace_all_uses_with(attribute)
        if any(_in_a_list(attribute, user) for user in attribute.users):
            # torch-mlir's importer takes a weight inside a list operand (index's indices)
            # as a literal it cannot mix with tensors: a copy of it is a tensor it can
            with graph.inserting_after(attribute):
                copy = graph.call_function(torch.ops.aten.clone.default, (attribute,))
            attribute.replace_all_uses_with(copy, delete_user_cb=lambda user: user is not copy)
    graph.eliminate_dead_code()
    graph.lint()
    module.recompile()
    return len(folded)


def _f32_arithmetic() -> tuple:
    """Ops in which a 0-d float64 operand beside a float32 tensor is computed in float32: eager
    rounds it to float32 first (a 0-d tensor does not widen a tensor of its own category)."""
    aten = torch.ops.aten
    return (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor,
            aten.where.self, aten.maximum.default, aten.minimum.default, aten.eq.Tensor,
            aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor)


def _narrows_exactly(constant: torch.Tensor, user: torch.fx.Node) -> bool:
    """Whether `user` computes the same with the float64 `constant` rounded to float32: a cast
    of it to float32, or arithmetic of it (0-d) with a float32 tensor of rank 1 or more."""
    aten = torch.ops.aten
    if user.target in (aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout):
        dtype = user.kwargs.get("dtype", user.args[1] if len(user.args) > 1 else None)
        return dtype == torch.float32
    if user.target not in _f32_arithmetic() or constant.dim() != 0:
        return False
    others = [getattr(a.meta.get("val"), "dtype", None) for a in user.all_input_nodes
              if getattr(a.meta.get("val"), "dim", lambda: 0)() > 0]
    return torch.float32 in others and torch.float64 not in others


def _narrowed_f64(module: torch.fx.GraphModule) -> list[str]:
    """Each float64 weight, buffer or constant of the module that every reader computes with in
    float32 anyway (_narrows_exactly) stored as float32, in place; their names. TOSA has no
    f64; these are what makes torch-mlir emit f64 casts in an otherwise float32 model."""
    narrowed = []
    for node in list(module.graph.nodes):
        if node.op != "get_attr":
            continue
        value = _attribute(module, node.target)
        checks = [u for u in node.users if u.target is torch.ops.aten._assert_tensor_metadata
                  .default]          # export's own dtype checks of it: gone with it
        readers = [u for u in node.users if u not in checks]
        if not (isinstance(value, torch.Tensor) and value.dtype == torch.float64
                and readers and all(_narrows_exactly(value, u) for u in readers)):
            continue
        for check in checks:
            module.graph.erase_node(check)
        name = f"_edgekit_f32_{len(narrowed)}"
        module.register_buffer(name, value.detach().to(torch.float32), persistent=True)
        with module.graph.inserting_before(node):
            attribute = module.graph.get_attr(name)
        node.replace_all_uses_with(attribute)
        module.graph.erase_node(node)
        narrowed.append(str(node.target))
        if not any(n.op == "get_attr" and n.target == node.target for n in module.graph.nodes):
            owner, _, leaf = str(node.target).rpartition(".")
            delattr(module.get_submodule(owner), leaf)   # not kept beside its copy
    if narrowed:
        module.graph.lint()
        module.recompile()
    return narrowed


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _output_kinds(program: Program) -> list[str]:
    return [spec.kind.name for spec in program.graph_signature.output_specs]


def _in_a_list(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    return any(isinstance(a, (list, tuple)) and node in a
               for a in (*user.args, *user.kwargs.values()))


def _attribute(module: torch.nn.Module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


def legalise_for_tosa(program: Program, samples: tuple[np.ndarray, ...]
                      ) -> tuple[Program, tuple[str, ...]]:
    """(the program with what TOSA cannot take made exactly in what it can, the build's notes
    saying what changed; the program unchanged and no notes when nothing did).

    - tensors computed from shapes and integer buffers alone (positions, masks, buckets,
      interpolation indices) are folded into constants (_folded_constants); the program is
      exported again from its folded module, on the samples it was exported with;
    - every comparison of a float tensor and a Python float is made against a 0-d constant of
      the tensor's dtype; attention is decomposed as torch-mlir's import decomposes it, to
      reach the comparison inside (the decomposed graph cannot be traced again: it holds
      prims, so a decomposition table is the only way in);
    - grouped convolutions of more groups than torch-mlir's TOSA lowering takes are split
      into convolutions of fewer groups (RegNet)."""
    notes = []
    # interpolation as the import decomposes it, so that its index math is there to fold
    interpolation = torch_mlir.decompositions_of({
        n.target for n in program.graph.nodes if n.op == "call_function"
        and str(n.target).startswith(("aten.upsample_", "aten._upsample_"))})
    # a grad-mode region (Llama's rotary embedding runs under no_grad) is a higher-order op
    # in the exported graph, its body out of the folding's reach; tracing again inlines it
    regions = any(isinstance(n.target, torch._ops.HigherOrderOperator)
                  and "grad" in str(n.target) for n in program.graph.nodes)
    if interpolation or regions:
        program = program.run_decompositions(interpolation)
    if not any(isinstance(d, torch.SymInt) for n in program.graph.nodes
               if n.op == "placeholder" for d in getattr(n.meta.get("val"), "shape", ())):
        # (not with dynamic shapes: an arange of a dimension is no constant there)
        module = program.module()
        folded, narrowed = _folded_constants(module), _narrowed_f64(module)
        if folded or narrowed:
            args = tuple(torch.from_numpy(np.array(s)) for s in samples)
            try:
                again = torch.export.export(module, args)
            except Exception as exc:  # torch.export raises many kinds: the model as it was
                return program, (f"constants not folded: exporting the folded module failed "
                                 f"({_first_line(exc)}); TOSA may refuse its i64/f64 ops",)
            if _output_kinds(again) != _output_kinds(program):   # a constant became state
                return program, (f"constants not folded: the folded program's outputs were "
                                 f"{', '.join(_output_kinds(again))}, not "
                                 f"{', '.join(_output_kinds(program))} (TOSA may refuse its "
                                 "i64/f64 ops)",)
            program = again
        if folded:
            notes.append(f"{folded} tensor(s) computed from shapes and integer buffers alone "
                         "(positions, masks, interpolation indices) folded into constants "
                         "(exact: eager's own values; TOSA takes no i64 arithmetic)")
        if narrowed:
            notes.append(f"{len(narrowed)} float64 constant(s) ({', '.join(narrowed[:3])}"
                         f"{', …' if len(narrowed) > 3 else ''}) stored as float32 (exact: "
                         "every use computes in float32, as eager does; TOSA takes no f64)")
    table: dict = {}
    compares = _may_compare_with_a_float(program)
    if compares:
        table.update(torch_mlir.decompositions_of(_attention_ops()))
        table.update({op: _in_tensor_dtype(op, tensor_op)
                      for op, tensor_op in _comparisons().items()})
    grouped = _wide_grouped_convolutions(program)
    if grouped:
        table[torch.ops.aten.conv2d.default] = _grouped_in_chunks
        notes.append(f"{len(grouped)} convolution(s) of more than {TOSA_MAX_GROUPS} groups "
                     f"({', '.join(grouped[:3])}{', …' if len(grouped) > 3 else ''}) split "
                     f"into convolutions of at most {TOSA_MAX_GROUPS} groups, concatenated "
                     "(exact: the same sums per output channel; torch-mlir's TOSA lowering "
                     f"takes at most {TOSA_MAX_GROUPS} groups)")
    if not table:
        return program, tuple(notes)
    try:
        rewritten = program.run_decompositions(table)
    except Exception as exc:  # a decomposition that does not trace: the model as it was
        kept = notes[:-1] if grouped else notes          # the split was not made
        return program, (*kept, "comparisons and grouped convolutions left as written: "
                         f"decomposing them failed ({_first_line(exc)}); TOSA may refuse them")
    count = _against_constants(rewritten) - _against_constants(program) if compares else 0
    if count > 0:
        notes.append(f"{count} float-scalar comparison(s) made in the tensor's dtype, as eager "
                     "PyTorch computes them, not in float64 (exact; TOSA takes no f64)")
    return (rewritten, tuple(notes)) if grouped or count > 0 else (program, tuple(notes))


# torch-mlir's TOSA lowering of a grouped (not depthwise) convolution, measured: 2 to 31
# groups lower (any channel count tried, up to 512), 32, 33, 48, 55 and 64 fail to legalize
# (`aten.convolution`) whatever the channels; RegNetY-400MF's last stage has 55.
TOSA_MAX_GROUPS = 31


def _groups(node: torch.fx.Node) -> int:
    return node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)


def _wide_grouped_convolutions(program: Program) -> list[str]:
    """`groups=N (in x out)` for each grouped convolution (not depthwise) of more groups than
    torch-mlir's TOSA lowering takes."""
    found = []
    for node in program.graph.nodes:
        if node.target is not torch.ops.aten.conv2d.default:
            continue
        groups, channels = _groups(node), node.args[0].meta["val"].shape[1]
        if groups > TOSA_MAX_GROUPS and groups != channels:
            found.append(f"groups={groups} ({channels}x{node.meta['val'].shape[1]})")
    return found


def _grouped_in_chunks(input, weight, bias=None, stride=(1, 1), padding=(0, 0),
                       dilation=(1, 1), groups=1):
    """conv2d with more than TOSA_MAX_GROUPS groups as convolutions of at most that many
    groups over slices of the channels, concatenated; others as they are."""
    channels = input.shape[1]
    if groups <= TOSA_MAX_GROUPS or groups == channels:
        return NotImplemented
    per_in, per_out = channels // groups, weight.shape[0] // groups
    outputs = []
    for first in range(0, groups, TOSA_MAX_GROUPS):
        count = min(TOSA_MAX_GROUPS, groups - first)
        rows = slice(first * per_out, (first + count) * per_out)
        outputs.append(torch.ops.aten.conv2d.default(
            input[:, first * per_in:(first + count) * per_in], weight[rows],
            None if bias is None else bias[rows], stride, padding, dilation, count))
    return torch.cat(outputs, dim=1)
