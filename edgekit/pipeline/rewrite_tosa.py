"""Part of stage `rewrite` for PyTorch models: comparisons of a float tensor with a Python float
made in the tensor's own dtype, so that no float64 reaches TOSA.

Why: torch-mlir's TOSA lowering of `aten.eq.Scalar(x, s)` (and ne/lt/le/gt/ge) on a float32 `x`
casts `x` to f64 and compares it with an f64 constant; IREE's TOSA input refuses both
(`'tosa.cast' op is not profile-aligned: element type 'f64' is not legal`). Every attention
written with `scaled_dot_product_attention` meets it: torch's decomposition of it checks
`scores == -inf` to zero fully masked rows. So BERT, T5, Whisper, CLIP and ViT (transformers'
default `sdpa` attention, or nn.MultiheadAttention) fell back from TOSA to Linalg.

The rewrite is exact: eager PyTorch itself compares a float32 tensor with a Python float
rounded to float32 (`torch.tensor([0.1]) == 0.1` is True), which is what `x == full((), s,
dtype=x.dtype)` computes; the f64 lowering is the one that differs from eager there.
"""

from __future__ import annotations

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


def _wide_gathers(program: Program) -> tuple[int, list[str]]:
    """(how many int64 gathers read a constant whose values all fit in int32, the others as
    `gather @ where` lines): only when there are no others is every int64 gather narrowed."""
    aten = torch.ops.aten
    sig = program.graph_signature
    named = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
             **sig.inputs_to_lifted_tensor_constants}
    values = {**program.state_dict, **program.constants}
    fitting, others = 0, []
    for node in program.graph.nodes:
        if node.target is not aten.gather.default:
            continue
        source = node.args[0]
        if getattr(source.meta.get("val"), "dtype", None) != torch.int64:
            continue
        while source.op == "call_function" and source.target in _views_and_copies():
            source = source.args[0]         # a view or copy of it reads the same values
        tensor = values.get(named.get(source.name, "")) if source.op == "placeholder" else None
        if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.int64 and (
                tensor.numel() == 0 or (int(tensor.min()) >= -2**31 and
                                        int(tensor.max()) < 2**31)):
            fitting += 1
        else:
            stack = node.meta.get("nn_module_stack") or {}
            where = next(reversed(stack.values()))[0] if stack else "forward"
            others.append(f"aten.gather @ {where}")
    return fitting, others


def _views_and_copies() -> tuple:
    aten = torch.ops.aten
    return (aten.expand.default, aten.view.default, aten.reshape.default, aten.slice.Tensor,
            aten.select.int, aten.unsqueeze.default, aten.squeeze.dim, aten.clone.default,
            aten.permute.default, aten.transpose.int, aten.alias.default)


def _gather_in_int32(x, dim, index, sparse_grad=False):
    """int64 values gathered as int32 (TOSA's gather takes no i64 values): only applied when
    every int64 gather reads a constant that fits (_wide_gathers), so the casts are exact."""
    if x.dtype != torch.int64:
        return NotImplemented
    return torch.ops.aten.gather.default(x.to(torch.int32), dim, index,
                                         sparse_grad=sparse_grad).to(torch.int64)


def legalise_for_tosa(program: Program) -> tuple[Program, tuple[str, ...]]:
    """(the program with what TOSA cannot take made exactly in what it can, the build's notes
    saying what changed; the program unchanged and no notes when nothing did).

    - every comparison of a float tensor and a Python float is made against a 0-d constant of
      the tensor's dtype; attention is decomposed as torch-mlir's import decomposes it, to
      reach the comparison inside (the decomposed graph cannot be traced again: it holds
      prims, so a decomposition table is the only way in);
    - int64 gathers of a constant whose values fit in int32 (BERT's token-type ids) gather
      int32 and widen the result."""
    table, notes = {}, []
    compares = _may_compare_with_a_float(program)
    if compares:
        table.update(torch_mlir.decompositions_of(_attention_ops()))
        table.update({op: _in_tensor_dtype(op, tensor_op)
                      for op, tensor_op in _comparisons().items()})
    narrowed, left = _wide_gathers(program)
    if narrowed and not left:
        table[torch.ops.aten.gather.default] = _gather_in_int32
        notes.append(f"{narrowed} int64 gather(s) of constants made in int32 (exact: every "
                     "value fits; TOSA gathers no i64)")
    if not table:
        return program, ()
    rewritten = program.run_decompositions(table)
    if compares:
        count = _against_constants(rewritten) - _against_constants(program)
        if count > 0:
            notes.insert(0, f"{count} float-scalar comparison(s) made in the tensor's dtype, as "
                            "eager PyTorch computes them, not in float64 (exact; TOSA takes no "
                            "f64)")
    return (rewritten, tuple(notes)) if notes else (program, ())
