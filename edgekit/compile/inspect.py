"""Seeing what was compiled, like Inductor's `run_and_get_code`.

Each graph variant runs through a Python wrapper generated here (the source is kept and is what
actually executes), and `run_and_get_code(fn, *args)` returns, per graph used during the call,
the FX code, the MLIR at each stage and that wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgekit.models.bundle import Bundle

_recording: list[list] = []


@dataclass
class GraphCode:
    graph: int
    target: str
    lowering: str
    compile_flags: tuple[str, ...]
    module: str                      # path of the .vmfb
    fx_code: str
    wrapper: str
    runs_on: str
    _program: object = field(repr=False, default=None)

    @property
    def mlir(self) -> dict[str, str]:
        """MLIR text (weights elided) per stage: 'torch' (imported) and the lowering's."""
        from edgekit.toolchain import torch_mlir
        imported = torch_mlir.import_program(self._program)
        stages = {"torch": torch_mlir.to_text(imported)}
        if self.lowering != "torch":
            stages[self.lowering] = torch_mlir.to_text(torch_mlir.lower(imported, self.lowering))
        return stages


def record_use(graph, variant) -> None:
    for codes in _recording:
        if not any(c.graph == graph.index and c.wrapper == variant.wrapper_source for c in codes):
            m = variant.bundle.manifest
            codes.append(GraphCode(graph=graph.index, target=m.target, lowering=m.lowering.used,
                                   compile_flags=m.compile_flags, module=str(variant.bundle.module),
                                   fx_code=graph.gm.code, wrapper=variant.wrapper_source,
                                   runs_on=variant.runner.description,
                                   _program=variant.program))


def run_and_get_code(fn, *args, **kwargs):
    """Call `fn` (typically a torch.compile'd function) and return (result, [GraphCode])."""
    codes: list[GraphCode] = []
    _recording.append(codes)
    try:
        result = fn(*args, **kwargs)
    finally:
        _recording.remove(codes)
    return result, codes


def wrapper_source(graph, signature: tuple, positions: tuple[int, ...], bundle: Bundle,
                   runner) -> str:
    m = bundle.manifest
    fixed = [f"arg{i}={v[1]!r}" for i, v in enumerate(signature) if v[0] == "value"]
    params = sum(1 for v in signature if v[0] == "parameter")
    if params:
        fixed.append(f"{params} parameter(s) baked into the module")
    return "\n".join([
        f"# edgekit: graph {graph.index} for target {m.target}, lowering {m.lowering.used}",
        f"# module: {bundle.module}",
        f"# runs on: {runner.description}",
        f"# specialized: {', '.join(fixed) or 'no scalar arguments'}",
        "import torch",
        "from torch.utils import _pytree as pytree",
        "",
        "",
        "def call(args):",
        f"    tensors = [args[i] for i in {positions!r}]",
        "    arrays = [t.detach().contiguous().cpu().numpy() for t in tensors]",
        "    outputs = runner.run(arrays)",
        "    return pytree.tree_unflatten([torch.from_numpy(a) for a in outputs], out_spec)",
        ""])


