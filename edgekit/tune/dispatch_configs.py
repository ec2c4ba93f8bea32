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
few around them: the outer (distribution) tiles of the parallel loops halved and doubled, and
the outermost reduction's vector tile halved and doubled — the levels whose effect on cache
reuse the compiler's heuristics guess — while the inner vector shape (the register tile) stays.
"""

from __future__ import annotations

import hashlib

Levels = tuple[tuple[str, tuple[int, ...]], ...]


def lowering_config(levels: Levels) -> str:
    """The printed `#iree_cpu.lowering_config` of these tile sizes (as IREE prints it)."""
    body = ", ".join(f"{name} = [{', '.join(map(str, sizes))}]" for name, sizes in levels)
    return f"#iree_cpu.lowering_config<{body}>"


def with_levels(source: str, config: str, levels: Levels) -> str | None:
    """The configured executable `source` with its root op's `config` replaced by `levels`;
    None when that configuration is not printed exactly once (nothing safe to edit)."""
    old = f"lowering_config = {config}"
    if source.count(old) != 1:
        return None
    return source.replace(old, f"lowering_config = {lowering_config(levels)}")


def set_digest(files: dict[str, str]) -> str:
    """The content digest of a set of substitutions {executable: source}: names and texts."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


def candidate_levels(levels: Levels, limit: int = 6) -> list[Levels]:
    """Tile sizes around the compiler's choice (not the choice itself), nearest first:
    every parallel distribution tile ×½ and ×2 (kept a multiple of its vector tile), the
    reduction's vector tile ×½ and ×2, and each distribution tile alone ×½ / ×2."""
    table = dict(levels)
    dist = table.get("distribution")
    vec = table.get("vector_common_parallel", ())
    red = table.get("vector_reduction")
    out: list[Levels] = []

    def add(name: str, sizes: tuple[int, ...]) -> None:
        new = tuple((n, sizes if n == name else s) for n, s in levels)
        if new != levels and new not in out:
            out.append(new)

    if dist:
        for factor in (0.5, 2.0):
            add("distribution", tuple(_scaled(d, vec, i, factor) for i, d in enumerate(dist)))
    first_red = next((i for i, r in enumerate(red or ()) if r), None)
    if red and first_red is not None:
        # the outermost reduced loop only (the inner ones: a conv window, mmt4d's K0)
        for factor in (0.5, 2.0):
            r = max(1, int(red[first_red] * factor))
            add("vector_reduction", red[:first_red] + (r,) + red[first_red + 1:])
    if dist:
        for i, d in enumerate(dist):
            for factor in (0.5, 2.0):
                if d:
                    add("distribution", dist[:i] + (_scaled(d, vec, i, factor),) + dist[i + 1:])
    return out[:limit]


def _scaled(d: int, vec: tuple[int, ...], i: int, factor: float) -> int:
    """`d` × factor, not below (and a multiple of) the vector tile of that loop; 0 stays 0
    (a loop not distributed)."""
    if d == 0:
        return 0
    step = vec[i] if i < len(vec) and vec[i] > 0 else 1
    scaled = max(step, int(d * factor))
    return max(step, scaled - scaled % step)


