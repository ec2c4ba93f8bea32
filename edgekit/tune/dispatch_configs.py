"""Per-dispatch tile sizes for IREE's llvm-cpu codegen (pure: text in, text out).

IREE's llvm-cpu codegen takes each dispatch's tile sizes from the `#iree_cpu.lowering_config`
its strategy selection puts on the dispatch's root op. `edgekit tune` reads what it chose from
the configured executables (`--iree-hal-dump-executable-configurations-to`,
toolchain/iree_configs.py), edits the root op's tile sizes in one executable, and hands the
edited executable back with `--iree-hal-substitute-executable-configurations-from=DIR` (a
file `<executable>.mlir` replaces that executable after selection, before translation).

Why not a tuning spec (`--iree-codegen-tuning-spec-path`): on llvm-cpu in IREE 3.13 the spec
runs (MaterializeUserConfigs) before encoding materialization and batch-dim insertion, so
a data-tiled matmul is still a `linalg.matmul` with encodings there (its config would have to
fit the later `linalg.mmt4d`) and batchless convolutions have one loop fewer: a spec written
from the configured IR never matches. A substitution edits the configuration the compiler
would use, exactly where it uses it. It is tied to the module it was made from (same model,
flags, target), which is what a tuning record is keyed on.

The search (tune/dispatch_search.py) starts from the tile sizes the compiler chose and tries a
few around them: the outer (distribution) tiles halved and doubled, the register tile
(vector_common_parallel) moved to or spread over another loop, and the outermost reduction's
vector tile halved and doubled (`candidate_levels`).
"""

from __future__ import annotations

import math
import re

from edgekit.toolchain.dispatch_sets import set_digest  # noqa: F401  (where it lived)

Levels = tuple[tuple[str, tuple[int, ...]], ...]


def lowering_config(levels: Levels) -> str:
    """The printed `#iree_cpu.lowering_config` of these tile sizes (as IREE prints it)."""
    body = ", ".join(f"{name} = [{', '.join(map(str, sizes))}]" for name, sizes in levels)
    return f"#iree_cpu.lowering_config<{body}>"


def with_levels(source: str, config: str, levels: Levels,
                was: Levels | None = None) -> str | None:
    """The configured executable `source` with its root op's `config` replaced by `levels`;
    None when that configuration is not printed exactly once (nothing safe to edit). Given
    the root's old tile sizes (`was`), a new register tile also goes to the ops fused around
    the root whose register tile is the old one's parallel prefix (as IREE itself gives them:
    a depthwise convolution's bias and activation). With the root alone changed, one of
    MobileNetV2-like's depthwise convolutions gained 0.018 ms where both gained 0.043."""
    old = f"lowering_config = {config}"
    if source.count(old) != 1:
        return None
    edited = source.replace(old, f"lowering_config = {lowering_config(levels)}")
    before = dict(was or ()).get("vector_common_parallel")
    after = dict(levels).get("vector_common_parallel")
    if before and after and before != after and len(before) == len(after):
        for n in range(1, len(before)):
            if before[n:] == after[n:] and before[:n] != after[:n]:
                edited = edited.replace(lowering_config((("vector_common_parallel", before[:n]),)),
                                        lowering_config((("vector_common_parallel", after[:n]),)))
    return edited


def candidate_levels(levels: Levels, limit: int = 6, vector_moves: bool = True
                     ) -> list[Levels]:
    """Tile sizes around the compiler's choice (not the choice itself), nearest first, the
    kinds interleaved so that a small `limit` still tries each: every parallel distribution
    tile ×½; the register tile ×2 on its widest loop; the register tile spread over two loops
    (8 lanes on another distributed loop, 4 on the widest); the register tile ×2 on its
    second vectorized loop; every distribution tile ×2; the register tile moved to another
    loop (16 or 8 lanes there, 1 elsewhere); the outermost reduction's vector tile ×½ and ×2; the
    register tile's widest loop halved; each distribution tile alone ×½ / ×2. Distribution
    tiles stay multiples of the register tile. `vector_moves=False` keeps the register tile
    (mmt4d: it is the data-tiling layout's inner tile)."""
    table = dict(levels)
    dist = table.get("distribution")
    vec = table.get("vector_common_parallel")
    red = table.get("vector_reduction")
    out: list[Levels] = []

    def add(**changed: tuple[int, ...]) -> None:
        new = tuple((n, changed.get(n, s)) for n, s in levels)
        new_dist, new_vec = dict(new).get("distribution"), dict(new).get("vector_common_parallel")
        if new_dist and new_vec and any(v and (d % v or d < v) for d, v in
                                        zip(new_dist, new_vec) if d):
            return        # a register tile that does not divide its distribution tile
        if new != levels and new not in out:
            out.append(new)

    moved, spread, halved = (_vector_moves(dist, vec) if vector_moves and dist and vec
                             else (None, None, None))
    deepened = _deepened(dist, vec) if vector_moves and dist and vec else None
    widened = _widened(dist, vec) if vector_moves and dist and vec else None
    if dist:
        add(distribution=tuple(_scaled(d, vec or (), i, 0.5) for i, d in enumerate(dist)))
    if widened:
        add(vector_common_parallel=widened)
    if spread:
        add(vector_common_parallel=spread)
    if deepened:
        add(vector_common_parallel=deepened)
    if dist:
        add(distribution=tuple(_scaled(d, vec or (), i, 2.0) for i, d in enumerate(dist)))
    if moved:
        add(vector_common_parallel=moved)
    first_red = next((i for i, r in enumerate(red or ()) if r), None)
    if red and first_red is not None:
        # the outermost reduced loop only (the inner ones: a conv window, mmt4d's K0)
        for factor in (0.5, 2.0):
            r = max(1, int(red[first_red] * factor))
            add(vector_reduction=red[:first_red] + (r,) + red[first_red + 1:])
    if halved:
        add(vector_common_parallel=halved)
    if dist:
        for i, d in enumerate(dist):
            for factor in (0.5, 2.0):
                if d:
                    add(distribution=dist[:i] + (_scaled(d, vec or (), i, factor),)
                        + dist[i + 1:])
    return out[:limit]


# The "weights once" move (measured on ResNet18-like, tosa, im2col'd 7x7 and 14x14
# convolutions, AVX-512, 1 thread): IREE distributes a data-tiled matmul one 16x16 output tile
# per workgroup, so the packed weights (the RHS, 9.4 MB for 49x512x4608) stream from memory
# once per 16 LHS rows; with every LHS row in one workgroup they stream once: 2.1 -> 1.32 ms
# (110 -> 175 GFLOP/s), 196x256x2304 1.32 -> 1.03 ms. Worth it only where the weights are big
# and the rows few (few LHS tiles held at once); the tuner keeps it only when it measures a win.
# (Data tiling may swap a narrow matmul's operands, so the RHS is then the activations: the
# same move streams the larger operand once.)
WEIGHTS_ONCE_MIN_BYTES = 256 * 1024
WEIGHTS_ONCE_MAX_ROWS = 256


def weights_once(root_name: str, levels: Levels, operand_shapes: tuple[tuple[int, ...], ...],
                 element_bytes: int = 4) -> Levels | None:
    """The tile sizes of a data-tiled matmul (`linalg.mmt4d` / `linalg.batch_mmt4d`) with all
    of its LHS rows and one RHS tile column in each workgroup, so that the weights are read
    once per call; None when the move does not apply (not such a matmul, small weights, many
    rows, a single column tile, or already so)."""
    batch = {"linalg.mmt4d": 0, "linalg.batch_mmt4d": 1}.get(root_name)
    table = dict(levels)
    dist = table.get("distribution")
    if batch is None or not dist or len(operand_shapes) < 2:
        return None
    lhs, rhs = operand_shapes[0], operand_shapes[1]
    if len(lhs) != 4 + batch or len(rhs) != 4 + batch or len(dist) != 6 + batch:
        return None
    m, n = batch, batch + 1               # the outer LHS-row and RHS-column tile loops
    m_tiles, n_tiles = lhs[m], rhs[batch]
    if math.prod(rhs) * element_bytes < WEIGHTS_ONCE_MIN_BYTES \
            or m_tiles * lhs[m + 2] > WEIGHTS_ONCE_MAX_ROWS or n_tiles < 2 \
            or not dist[m] or not dist[n] or (dist[m], dist[n]) == (m_tiles, 1):
        return None
    # one RHS tile column per workgroup: its weights read once, as many workgroups as tiles,
    # and a workgroup's footprint bounded (13 row tiles x 4 columns did not compile: stack)
    new_dist = dist[:m] + (m_tiles, 1) + dist[m + 2:]
    return tuple((name, new_dist if name == "distribution" else sizes)
                 for name, sizes in levels)


# The "wide accumulators" move (measured on the KWS MLP, tosa, AVX-512, 1 thread, in process):
# IREE gives a matrix-vector product (one output row: a batch-1 nn.Linear) a register tile of
# one or two vectors across the output columns, so every step of its reduction loop adds into
# the same one or two registers and waits out the FMA latency (4 cycles) each time: the
# 256x256 layers ran at 31 GFLOP/s. With 8 vectors (128 f32 lanes on AVX-512) the FMAs are
# independent and the loop streams the weights: the model 23.3 -> 17.6 us per call (ORT 16.9).
MATVEC_LANES = 128


def wide_accumulators(root_name: str, levels: Levels,
                      operand_shapes: tuple[tuple[int, ...], ...],
                      lanes: int = MATVEC_LANES) -> Levels | None:
    """The tile sizes of a matrix-vector product (`linalg.matmul` / `linalg.batch_matmul`
    whose output has one row) with its register tile widened across the output columns to
    the largest multiple of the compiler's vector that is at most `lanes` and fits the
    columns, and the columns' distribution tile a multiple of it; None when the move does
    not apply (not such a product, few columns, already so)."""
    batch = {"linalg.matmul": 0, "linalg.batch_matmul": 1}.get(root_name)
    table = dict(levels)
    dist, vec = table.get("distribution"), table.get("vector_common_parallel")
    if batch is None or not dist or not vec or len(operand_shapes) < 3:
        return None
    out = operand_shapes[2]
    if len(out) != 2 + batch or len(dist) != 3 + batch or len(vec) != 3 + batch:
        return None
    m, n = batch, batch + 1
    rows, cols, step = out[m], out[n], vec[n]
    if rows != 1 or step <= 0 or not dist[n]:
        return None
    wide = max((k * step for k in range(1, lanes // step + 1) if k * step <= cols), default=0)
    if wide <= step:
        return None
    new_dist = dist[:n] + (-(-max(dist[n], wide) // wide) * wide,) + dist[n + 1:]
    new_vec = vec[:n] + (wide,) + vec[n + 1:]
    return tuple((name, new_dist if name == "distribution" else
                  new_vec if name == "vector_common_parallel" else sizes)
                 for name, sizes in levels)


# The "two-vector tiles" move (measured on MobileNetV2-like, tosa, pointwise-as-matmul, AVX-512,
# 1 thread, HAL profile, fastest call): without data tiling IREE gives an f32 matmul (its 1x1
# convolutions as batch_matmul or matmul-like generics) a register tile of 7-8 rows by ONE
# vector of output channels, 7-8 accumulators: each step of the reduction broadcasts 7-8 LHS
# values for 7-8 FMAs, and the FMAs wait on each other. Two vectors across the channels (14-16
# accumulators, the same broadcasts feeding twice the FMAs): its 49-row projections 0.616 ->
# 0.306 ms (49x160x960), 0.603 -> 0.319 (49x320x960), 0.596 -> 0.475 (49x1280x320), the
# 196-row ones 0.407 -> 0.306; the dispatches' sum 7.92 -> 6.56 ms. Four vectors (28
# accumulators, /tmp experiment): 9.67 ms, spills (the 56x56 expand 0.17 -> 0.92 ms).
TWO_VECTOR_MAX_ROWS = 8
TWO_VECTOR_MAX_LANES = 256      # rows x columns of the widened tile: 16 AVX-512 accumulators


def two_vector_tiles(root_name: str, levels: Levels,
                     operand_shapes: tuple[tuple[int, ...], ...]) -> Levels | None:
    """The tile sizes of a matmul (`linalg.matmul`, `linalg.batch_matmul`, or a matmul-like
    `linalg.generic`: one reduced loop, innermost) whose register tile is several rows by one
    vector on the output's last (channel) dimension (at most 8 rows, 256 lanes once widened),
    with that tile two vectors wide and its
    distribution tile a multiple of it; None when the move does not apply (a matrix-vector
    product, other vectors, columns not a multiple of two vectors, a convolution)."""
    if root_name not in ("linalg.matmul", "linalg.batch_matmul", "linalg.generic"):
        return None
    table = dict(levels)
    dist, vec = table.get("distribution"), table.get("vector_common_parallel")
    red = table.get("vector_reduction")
    if not dist or not vec or not red or len(operand_shapes) < 3:
        return None
    out = operand_shapes[-1]
    loops = len(vec)
    # parallel loops = the output's dims, then one reduction loop (a convolution has more)
    if len(dist) != loops or len(red) != loops or len(out) != loops - 1 \
            or [i for i, r in enumerate(red) if r] != [loops - 1] or vec[-1] or dist[-1]:
        return None
    n = loops - 2                       # the output's last dimension: its channels
    step, cols = vec[n], out[-1]
    rows = math.prod(v for i, v in enumerate(vec[:n]) if v > 1)
    if step <= 1 or not 1 < rows <= TWO_VECTOR_MAX_ROWS or cols % (2 * step) or not dist[n] \
            or rows * 2 * step > TWO_VECTOR_MAX_LANES:
        return None
    wide = 2 * step
    new_dist_n = -(-max(dist[n], wide) // wide) * wide
    if cols % new_dist_n:
        new_dist_n = wide
    new_dist = dist[:n] + (new_dist_n,) + dist[n + 1:]
    new_vec = vec[:n] + (wide,) + vec[n + 1:]
    return tuple((name, new_dist if name == "distribution" else
                  new_vec if name == "vector_common_parallel" else sizes)
                 for name, sizes in levels)


def _vector_moves(dist: tuple[int, ...], vec: tuple[int, ...]):
    """(register tile moved to another distributed loop, spread over two, widest halved).
    The compiler vectorizes one loop, often the innermost output loop; when that loop reads
    its input with a stride (a strided 1x1 convolution as matmul_like), every vector is a
    gather: ResNet18-like's 28-lane tile on such a loop took 143 ms where 8x4 lanes on the
    output channels and that loop took 0.43 ms (measured here, HAL profile)."""
    if len(vec) != len(dist):
        return None, None, None
    widest = max(range(len(vec)), key=lambda i: vec[i])
    if vec[widest] <= 1:
        return None, None, None
    others = [i for i, d in enumerate(dist) if d and i != widest and vec[i] <= 1]
    moved = spread = None
    for j in others:
        lanes = next((n for n in (16, 8) if dist[j] % n == 0), None)
        if lanes and moved is None:
            moved = tuple(lanes if i == j else (min(v, 1) if i < len(dist) and dist[i] else v)
                          for i, v in enumerate(vec))
        if dist[j] % 8 == 0 and spread is None and vec[widest] % 4 == 0:
            spread = tuple(8 if i == j else 4 if i == widest else
                           (min(v, 1) if dist[i] else v) for i, v in enumerate(vec))
    halved = None
    if vec[widest] % 2 == 0:
        halved = vec[:widest] + (vec[widest] // 2,) + vec[widest + 1:]
    return moved, spread, halved


def _deepened(dist: tuple[int, ...], vec: tuple[int, ...]) -> tuple[int, ...] | None:
    """The register tile doubled on its second vectorized loop (more independent rows per
    register tile), or raised to the largest divisor of that loop's distribution tile below
    double: MobileNetV2-like's 56x56 depthwise convolutions, 4 -> 8 output columns by 16
    channels, 0.166 -> 0.123 ms and 0.198 -> 0.175 ms; ResNet18-like's 56x56 3x3 ones (a
    56-column distribution tile), 8 -> 14 columns, 1.075 -> 0.988 ms (HAL profile, 1 thread)."""
    if len(vec) != len(dist):
        return None
    lanes = sorted((i for i, v in enumerate(vec) if v > 1 and dist[i]), key=lambda i: -vec[i])
    if len(lanes) < 2:
        return None
    j = lanes[1]
    deeper = next((n for n in range(2 * vec[j], vec[j], -1) if dist[j] % n == 0), None)
    if deeper is None:
        return None
    return vec[:j] + (deeper,) + vec[j + 1:]


def _widened(dist: tuple[int, ...], vec: tuple[int, ...]) -> tuple[int, ...] | None:
    """The register tile doubled on its widest loop (two vectors across the output channels
    where the compiler takes one: twice the accumulators per input broadcast). IREE gives a
    direct convolution 16 channels by 7-8 columns on AVX-512, 8 of its 32 vector registers;
    32 channels: ResNet18-like's 3x3 convolutions 1.08 -> 0.94-0.96 ms at 56x56 and 1.15 -> 0.94
    ms at 28x28, the 7x7 stem 1.23 -> 1.09 ms (HAL profile, 1 thread, fastest call: 190-218 ->
    217-246 GFLOP/s). Only where the distribution tile takes it whole."""
    if len(vec) != len(dist):
        return None
    widest = max(range(len(vec)), key=lambda i: vec[i])
    if vec[widest] <= 1 or not dist[widest] or dist[widest] % (2 * vec[widest]):
        return None
    return vec[:widest] + (2 * vec[widest],) + vec[widest + 1:]


def _scaled(d: int, vec: tuple[int, ...], i: int, factor: float) -> int:
    """`d` × factor, not below (and a multiple of) the vector tile of that loop; 0 stays 0
    (a loop not distributed)."""
    if d == 0:
        return 0
    step = vec[i] if i < len(vec) and vec[i] > 0 else 1
    scaled = max(step, int(d * factor))
    return max(step, scaled - scaled % step)


DISPATCH_SHAPE = re.compile(r"_(conv|matmul_like|batch_matmul|matmul)_((?:\d+x)+\d+)_f")


def flop_count(name: str) -> float | None:
    """2·∏dims of IREE's conv/matmul dispatch names: conv_HxWxCoutxKhxKw[xCin] (no Cin for
    depthwise), matmul_like_…xNxK, batch_matmul_BxMxNxK."""
    m = DISPATCH_SHAPE.search(name)
    return 2.0 * math.prod(int(d) for d in m.group(2).split("x")) if m else None


def hot_dispatches(configured: list, costs: dict[str, float] | None,
                   top: int) -> list:
    """The `top` configured dispatches that cost the most (by measured ms, else by FLOPs)."""
    def cost(d) -> float:
        if costs is not None:
            return max((ms for key, ms in costs.items() if key.startswith(d.function)),
                       default=0.0)
        return flop_count(d.function) or 0.0
    ranked = sorted(configured, key=cost, reverse=True)
    return [d for d in ranked if cost(d) > 0][:top]
