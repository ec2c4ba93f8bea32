"""`--edgekit-softmax-by-columns=N`: a softmax over the last dimension of a tensor whose
second-to-last dimension has at least N rows is computed over the transpose, as a softmax over
dimension -2, and transposed back. The same sums in the same precision: only the loop order
changes.

Why: IREE 3.13's llvm-cpu code for a softmax over the innermost dimension reduces each row's
max and sum horizontally, one 16-lane vector at a time, and those horizontal reductions come
out as scalar code (`vmaxss`/`vcmpunordss`, `vaddss` on AVX-512). Over an outer dimension the
reductions run across rows, lane by lane, in full vectors. Measured here (1 thread, local-sync,
fastest call): a 1x4x128x128 softmax 0.163 ms as written vs 0.057 ms by columns; onnxruntime's
Softmax takes 0.024 ms. In an attention block (softmax(q·kᵀ·s)·v) IREE folds the two transposes
into the neighbouring batch matmuls. IREE's own attention op (`iree_linalg_ext.attention`,
which IREE's torch input makes of `aten.scaled_dot_product_attention`) was slower still on this
shape (0.56 vs 0.47 ms for q·kᵀ, softmax and ·v together).
"""

from __future__ import annotations

import torch


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
               and by_columns(tuple(n.args[0].meta["val"].shape), n.args[1], min_rows))
