"""What IREE's llvm-cpu codegen chose per dispatch: read from the configured executable sources
that `--iree-hal-dump-executable-configurations-to=DIR` writes (one `configured_module_<name>.mlir`
per executable, after strategy selection, before translation).

For each executable this gives its root op (the one whose `#iree_cpu.lowering_config` has the
`distribution` level: the op the other ops are tiled around), its tile sizes per level, the
function's translation_info and the source itself (what a tuned substitution edits:
tune/dispatch_configs.py). Parsing needs IREE's dialects, hence here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PREFIX = "configured_module_"
_LEVEL = re.compile(r"(\w+) = \[([0-9, ]*)\]")


@dataclass(frozen=True)
class ConfiguredDispatch:
    executable: str                    # hal.executable symbol: main_dispatch_12
    function: str                      # its function: main_dispatch_12_conv_128x28x28x…
    root_name: str                     # linalg.mmt4d, linalg.generic, …
    levels: tuple[tuple[str, tuple[int, ...]], ...]   # (level, tile sizes), as the compiler chose
    lowering_config: str               # the printed attribute, for the report
    translation_info: str              # the function's printed translation_info
    source: str                        # the configured executable (what a substitution edits)
    operand_shapes: tuple[tuple[int, ...], ...] = ()   # the root's operands (ins, then outs)


def read_configured(directory: Path) -> list[ConfiguredDispatch]:
    """Every executable in DIR with a root op whose configuration is plain integer tile sizes
    (others — scalable vectors, GPU-style configs — are left out: nothing to search here)."""
    from iree.compiler import ir
    found = []
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = False
    for path in sorted(directory.glob(f"{_PREFIX}*.mlir")):
        module = ir.Module.parse(path.read_text(), ctx)
        for func in _functions(module.operation):
            dispatch = _root_of(func, path, path.stem[len(_PREFIX):])
            if dispatch is not None:
                found.append(dispatch)
    return found


def _functions(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                if child.operation.name == "func.func" and "translation_info" in child.attributes:
                    yield child
                else:
                    yield from _functions(child)


def _root_of(func, path: Path, executable: str) -> ConfiguredDispatch | None:
    from iree.compiler import ir
    roots = [op for op in _walk(func)
             if "lowering_config" in op.attributes
             and "distribution" in str(op.attributes["lowering_config"])]
    if len(roots) != 1:
        return None
    root = roots[0]
    config = str(root.attributes["lowering_config"])
    if not config.startswith("#iree_cpu.lowering_config<"):
        return None
    body = config[len("#iree_cpu.lowering_config<"):-1]
    levels = tuple((name, tuple(int(v) for v in values.split(",") if v.strip()))
                   for name, values in _LEVEL.findall(body))
    # every level must be a plain list of integers (no scalable `[[8], 16]`, no other fields)
    if not levels or _LEVEL.sub("", body).replace(",", "").strip():
        return None
    return ConfiguredDispatch(
        executable=executable, function=ir.StringAttr(func.attributes["sym_name"]).value,
        root_name=root.operation.name, levels=levels, lowering_config=config,
        translation_info=str(func.attributes["translation_info"]),
        source=path.read_text(), operand_shapes=_shapes(root))


def _shapes(op) -> tuple[tuple[int, ...], ...]:
    """Static shapes of the op's ranked tensor operands (a dynamic one: empty)."""
    from iree.compiler import ir
    shapes = []
    for value in op.operands:
        try:
            t = ir.RankedTensorType(value.type)
        except ValueError:
            shapes.append(())
            continue
        shapes.append(() if not t.has_static_shape else tuple(t.shape))
    return tuple(shapes)


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _walk(child)
