"""Intermediate tensors of an exported PyTorch model, made extra outputs of the graph.

Two granularities: the boundary of every submodule (the last node that runs inside it), and
every op between the last tap that agreed and the first that did not (the ops of the first
failing module). A tap names its node, the innermost module that computed it and its op kind.
The reference of a tap is the same graph run eagerly by PyTorch (torch.export's ATen graph
computes what the model's eager forward computes).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

import torch
from torch.utils import _pytree as pytree


@dataclass(frozen=True)
class Tap:
    node: str        # the fx node's name in the graph
    module: str      # innermost module path ("" = the model's own forward)
    module_type: str
    op: str          # e.g. aten.convolution.default
    output: bool = False   # one of the model's own outputs


def graph_of(program: torch.export.ExportedProgram) -> torch.fx.GraphModule:
    """The program as a runnable GraphModule (weights as attributes, user inputs only)."""
    return program.module()


def _tensor_node(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return (node.op == "call_function" and isinstance(val, torch.Tensor)
            and (val.dtype.is_floating_point or val.dtype in (torch.int8, torch.uint8,
                                                               torch.int32, torch.int64)))


def _stack(node: torch.fx.Node) -> list[tuple[str, str]]:
    """(module path, type name) from the outermost module in, root ("") first."""
    return [(path, str(kind).rsplit(".", 1)[-1])
            for path, kind in (node.meta.get("nn_module_stack") or {}).values()]


def _tap(node: torch.fx.Node, output: bool = False) -> Tap:
    stack = _stack(node) or [("", "")]
    path, kind = stack[-1]
    return Tap(node=node.name, module=path, module_type=kind, op=_op_name(node), output=output)


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    return str(getattr(target, "__name__", target)) if not isinstance(
        target, torch._ops.OpOverload) else f"aten.{target.__name__}" \
        if target.namespace == "aten" else f"{target.namespace}.{target.__name__}"


def model_outputs(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return [n for n in pytree.tree_leaves(out.args[0]) if isinstance(n, torch.fx.Node)]


def boundary_taps(gm: torch.fx.GraphModule) -> list[Tap]:
    """One tap per submodule boundary (its last tensor node), in execution order, then the
    model's outputs. A node that ends several nested modules is named by the innermost."""
    last: dict[str, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if not _tensor_node(node):
            continue
        for path, _ in _stack(node):
            if path:
                last[path] = node
    chosen = {n.name for n in last.values()}
    outputs = {n.name for n in model_outputs(gm)}
    return [_tap(n, n.name in outputs) for n in gm.graph.nodes
            if _tensor_node(n) and (n.name in chosen or n.name in outputs)]


def op_taps(gm: torch.fx.GraphModule, after: str | None, upto: str) -> list[Tap]:
    """Every tensor op after node `after` (None: from the start) up to and including `upto`."""
    outputs = {n.name for n in model_outputs(gm)}
    taps, inside = [], after is None
    for node in gm.graph.nodes:
        if inside and _tensor_node(node):
            taps.append(_tap(node, node.name in outputs))
        if node.name == after:
            inside = True
        if node.name == upto:
            break
    return taps


def with_taps(gm: torch.fx.GraphModule, taps: list[Tap]) -> torch.fx.GraphModule:
    """A copy of `gm` returning a flat tuple: the tapped tensors, in `taps` order (the model's
    own outputs are taps too, so a build of it is checked whole)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch's own pytree deprecation
        tapped = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    nodes = {n.name: n for n in tapped.graph.nodes}
    out = next(n for n in tapped.graph.nodes if n.op == "output")
    tapped.graph._codegen = torch.fx.graph.CodeGen()   # flat args and a plain tuple out
    out.args = (tuple(nodes[t.node] for t in taps),)
    tapped.graph.lint()
    tapped.recompile()
    return tapped


def node_values(gm: torch.fx.GraphModule, args: tuple[torch.Tensor, ...]
                ) -> dict[str, torch.Tensor]:
    """Every node's value on one sample (eager): the reference, and a reproducer's inputs."""
    values: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if isinstance(result, torch.Tensor):
                values[n.name] = result.detach()
            return result

    flat = copy_flat(gm)
    with torch.no_grad():
        Recorder(flat).run(*args)
    return values


def copy_flat(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    return with_taps(gm, [Tap(n.name, "", "", "") for n in model_outputs(gm)])


@dataclass(frozen=True)
class _Ref:
    kind: str        # "input" (an operand from another op) | "const" (a weight, baked in)
    key: int | str


class OneOp(torch.nn.Module):
    """One node of a graph alone: its tensor operands that come from other ops are inputs
    (`inputs`: their node names, in order), weights and constants (get_attr) are buffers."""

    def __init__(self, gm: torch.fx.GraphModule, node: torch.fx.Node):
        super().__init__()
        self.target = node.target
        self.inputs: list[str] = []

        def bind(value):
            if isinstance(value, (list, tuple)):
                return type(value)(bind(x) for x in value)
            if not isinstance(value, torch.fx.Node):
                return value
            if value.op == "get_attr":
                name = f"const_{len(self._buffers)}"
                self.register_buffer(name, _attr(gm, str(value.target)).detach().clone())
                return _Ref("const", name)
            self.inputs.append(value.name)
            return _Ref("input", len(self.inputs) - 1)

        self.template_args = bind(tuple(node.args))
        self.template_kwargs = {k: bind(v) for k, v in node.kwargs.items()}

    def forward(self, *tensors):
        def fill(v):
            if isinstance(v, _Ref):
                return tensors[v.key] if v.kind == "input" else getattr(self, v.key)
            if isinstance(v, (list, tuple)):
                return type(v)(fill(x) for x in v)
            return v
        return self.target(*fill(self.template_args),
                           **{k: fill(v) for k, v in self.template_kwargs.items()})


def _attr(gm: torch.nn.Module, dotted: str) -> torch.Tensor:
    obj = gm
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


class TorchGraph:
    """The tap points of an exported PyTorch model and the variants that return them (the
    same interface as onnx_taps.OnnxGraph)."""

    def __init__(self, program: torch.export.ExportedProgram, samples, names):
        self.gm = graph_of(program)
        self.samples, self.names = tuple(samples), tuple(names)

    def boundary_taps(self) -> list[Tap]:
        return boundary_taps(self.gm)

    def op_taps(self, after: str | None, upto: str) -> list[Tap]:
        return op_taps(self.gm, after, upto)

    def exported(self, taps: list[Tap]):
        from edgekit.bisect.variant import exported_module
        return exported_module(with_taps(self.gm, taps), self.samples, self.names)

    def reproducer(self, tap: Tap):
        """The op alone, fed the values its operands have inside the model (eager)."""
        import numpy as np

        from edgekit.bisect.variant import exported_module
        node = next(n for n in self.gm.graph.nodes if n.name == tap.node)
        one = OneOp(self.gm, node)
        values = node_values(self.gm, tuple(torch.from_numpy(np.array(s))
                                            for s in self.samples))
        inputs = tuple(values[name].contiguous().numpy() for name in one.inputs)
        return exported_module(one, inputs, tuple(f"in_{i}" for i in range(len(inputs))))
