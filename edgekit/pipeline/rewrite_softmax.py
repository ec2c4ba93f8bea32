"""`--edgekit-softmax-by-columns=N`: a softmax over the last dimension of a tensor whose
second-to-last dimension has at least N rows is computed over the transpose, as a softmax over
dimension -2, and transposed back. The same sums in the same precision: only the loop order
changes.

Why: IREE 3.13's llvm-cpu code for a softmax over the innermost dimension reduces each row's
max and sum horizontally, one 16-lane vector at a time, and those horizontal reductions come
out as scalar code (`vmaxss`/`vcmpunordss`, `vaddss` on AVX-512). Over an outer dimension the
reductions run across rows, lane by lane, in full vectors. Measured here (1 thread, local-sync,
fastest call): a 1x4x128x128 softmax alone 0.163 ms as written vs 0.057 ms by columns. In the
text encoder's attention (softmax(q·kᵀ·s)·v, data tiling) the softmax took 0.152 ms per layer
as written, 0.066 by columns of a transposed input (IREE moves that transpose into the max
reduction, which then reads rows again: `scores_by_columns` avoids it), 0.035 from the
transposed product (onnxruntime's Softmax: 0.024); the transposes of q and of the result land in
the neighbouring matmuls' packs (no transpose dispatch in the profile). IREE's own attention op
(`iree_linalg_ext.attention`, which IREE's torch input makes of a raw
`aten.scaled_dot_product_attention`; torch-mlir's torch backend decomposes it) was slower than
the written-out block on this shape (0.56 vs 0.47 ms median for q·kᵀ, softmax and ·v).
"""

from __future__ import annotations

import torch


def scores_by_columns(program: torch.export.ExportedProgram, min_rows: int
                      ) -> torch.export.ExportedProgram:
    """A copy of the program in which each softmax over the last dimension of a (scaled) matmul,
    softmax(a·b·s), is computed by columns from the transposed product: softmax(bᵀ·aᵀ·s, dim=-2)ᵀ.
    The product comes out of its matmul already transposed, so no reduction of the softmax has
    to read across a transpose (IREE folds the transpose of a softmax's input into its max
    reduction, which then reduces along the rows again). The others are left to
    `softmax_by_columns`."""
    aten = torch.ops.aten
    program = program.run_decompositions({})   # a copy: the caller's program stays as it was
    graph = program.graph_module.graph
    for softmax in [n for n in graph.nodes if n.target is aten.softmax.int]:
        x, dim, *rest = softmax.args
        if rest and rest[0] is not None or softmax.kwargs or \
                not by_columns(_shape(x), dim, min_rows):
            continue    # a dtype cast, or not by columns: left to softmax_by_columns
        scaled = x.target in (aten.div.Tensor, aten.mul.Tensor) and \
            not isinstance(x.args[1], torch.fx.Node)
        product = x.args[0] if scaled else x
        if product.target is not aten.matmul.default or len(product.users) != 1 or \
                len(x.users) != 1 or min(len(_shape(a)) for a in product.args) < 2:
            continue
        a, b = product.args
        with graph.inserting_before(product):
            transposed = graph.call_function(aten.matmul.default, (
                graph.call_function(aten.transpose.int, (b, -2, -1)),
                graph.call_function(aten.transpose.int, (a, -2, -1))))
        product.replace_all_uses_with(transposed)
        graph.erase_node(product)
        softmax.args = (x, -2)
        with graph.inserting_after(softmax):
            back = graph.call_function(aten.transpose.int, (softmax, -2, -1))
        softmax.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
    graph.lint()
    program.graph_module.recompile()
    return program


def _shape(node: torch.fx.Node) -> tuple:
    """The node's static shape as export recorded it (() when it did not)."""
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def softmax_by_columns(min_rows: int):
    """A decomposition of `aten.softmax.int` for `ExportedProgram.run_decompositions`."""
    aten = torch.ops.aten

    def softmax(x, dim, dtype=None):
        if dtype is not None:
            x = x.to(dtype)
        if not by_columns(tuple(x.shape), dim, min_rows):
            return aten._softmax.default(x, dim, False)
        return aten._softmax.default(x.transpose(-2, -1), -2, False).transpose(-2, -1)
    return softmax


def by_columns(shape: tuple, dim: int, min_rows: int) -> bool:
    """Whether a softmax over `dim` of a tensor of `shape` is computed by columns: over the last
    dimension, with at least `min_rows` rows (static) to vectorize across."""
    rank = len(shape)
    return (rank >= 2 and dim % rank == rank - 1 and isinstance(shape[-2], int)
            and shape[-2] >= min_rows)


def count_softmax(program: torch.export.ExportedProgram) -> int:
    return sum(1 for n in program.graph.nodes if n.target is torch.ops.aten.softmax.int)


def softmax_rewritten(program: torch.export.ExportedProgram, min_rows: int) -> int:
    """How many of the program's softmax `softmax_by_columns(min_rows)` computes by columns."""
    return sum(1 for n in program.graph.nodes if n.target is torch.ops.aten.softmax.int
               and by_columns(_shape(n.args[0]), n.args[1], min_rows))
