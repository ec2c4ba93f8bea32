"""`edgekit check MODEL --target T`: which operators make it through import, TOSA, Linalg and
the target's compiler — per operator type, on the smallest module that holds one instance of it.

For ONNX the op types are the graph's node types; for PyTorch, the ATen ops of the exported
graph. Each op is cut out with its real input shapes (constant operands stay constants, so a
Reshape keeps its shape) and taken through the stages separately, so one unsupported op does not
hide the others. A failing op's module is saved as its reproducer.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from edgekit.config.profiles import Target
from edgekit.pipeline.lower import save_reproducer
from edgekit.toolchain import iree, torch_mlir


@dataclass
class OpStatus:
    op: str
    count: int
    imported: bool | None = None
    tosa: bool | None = None
    linalg: bool | None = None
    compiled: bool | None = None       # for the target, through the first lowering that worked
    failure: str = ""                  # the first failure: "stage: reason"
    reproducer: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.imported and self.compiled)


@dataclass
class CheckReport:
    model: str
    kind: str                          # "onnx" or "pytorch"
    target: str
    ops: list[OpStatus] = field(default_factory=list)
    whole_model: dict[str, bool] = field(default_factory=dict)  # lowering → lowers+compiles
    chosen: str | None = None          # what `lowering: auto` would use
    note: str = ""                     # quantized ONNX models: the path they take, or refusal

    @property
    def buildable(self) -> bool:
        return self.chosen is not None


def check_op(name: str, count: int, make_module, target: Target, repro_root: Path) -> OpStatus:
    """Take one op's minimal module through import, both lowerings and the target compile."""
    status = OpStatus(op=name, count=count)
    repro = repro_root / name.replace("/", "_").replace("::", ".")
    try:
        imported = make_module()
        status.imported = True
    except torch_mlir.LowerFailure as failure:
        status.imported = False
        status.failure = f"import: {_first_line(failure.diagnostics)}"
        save_reproducer(repro, None, failure.diagnostics)
        status.reproducer = str(repro)
        return status
    except Exception as exc:  # cutting the op out failed: say so, keep checking the others
        status.imported = False
        status.failure = f"import: {type(exc).__name__}: {_first_line(str(exc))}"
        return status
    lowered: dict[str, bytes] = {}
    for lowering in ("tosa", "linalg"):
        try:
            lowered[lowering] = torch_mlir.lower(imported, lowering)
            setattr(status, lowering, True)
        except torch_mlir.LowerFailure as failure:
            setattr(status, lowering, False)
            status.failure = status.failure or f"{lowering}: {_first_line(failure.diagnostics)}"
            save_reproducer(repro / lowering, imported, failure.diagnostics)
            status.reproducer = str(repro)
    order = [lw for lw in target.lowering if lw in lowered] + \
        (["torch"] if "torch" in target.lowering else [])
    for lowering in order:
        module = lowered.get(lowering, imported)
        try:
            iree.compile_bytes(module, iree.compile_flags(target, lowering))
            status.compiled = True
            break
        except iree.CompileFailure as failure:
            status.compiled = False
            status.failure = status.failure or \
                f"compile ({lowering}): {_first_line(failure.diagnostics)}"
            save_reproducer(repro / f"compile-{lowering}", module, failure.diagnostics)
            status.reproducer = str(repro)
    return status


def check_onnx(model, model_path: str, target: Target, repro_root: Path) -> CheckReport:
    from edgekit.errors import QuantizationError
    from edgekit.pipeline.quantize.onnx_qdq import qdq_summary
    report = CheckReport(model=model_path, kind="onnx", target=target.name)
    first: dict[str, object] = {}
    counts = Counter()
    for node in model.graph.node:
        key = f"{node.domain + '.' if node.domain else ''}{node.op_type}"
        counts[key] += 1
        first.setdefault(key, node)
    for op, node in first.items():
        report.ops.append(check_op(op, counts[op], lambda n=node: torch_mlir.import_onnx(
            _single_node_model(model, n)), target, repro_root))
    try:
        qdq = qdq_summary(model, model_path)
    except QuantizationError as refused:  # QOperator: the build refuses it, whatever compiles
        report.note = f"{refused.what}; {refused.hint}"
        return report
    if qdq is None or qdq.quantized == 0:
        return _with_whole_model(report, lambda: torch_mlir.import_onnx_both(model), target,
                                 target.lowering)
    # int8 builds take the torch lowering only (IREE's ONNX input keeps them integer)
    report.note = (f"QDQ int8 model: {qdq.quantized} of {qdq.contractions} contractions have "
                   "quantized inputs; `lowering: auto` takes torch (IREE's ONNX input), the "
                   "lowering that keeps them integer")
    return _with_whole_model(report, lambda: torch_mlir.import_onnx_both(model), target,
                             ("torch",))


def check_program(program: torch.export.ExportedProgram, model_path: str, target: Target,
                  repro_root: Path) -> CheckReport:
    report = CheckReport(model=model_path, kind="pytorch", target=target.name)
    decomposed = program.run_decompositions(torch_mlir._decompositions())
    nodes = [n for n in decomposed.graph.nodes if n.op == "call_function"]
    counts = Counter(_op_name(n) for n in nodes)
    first: dict[str, torch.fx.Node] = {}
    for n in nodes:
        first.setdefault(_op_name(n), n)
    for op, node in first.items():
        report.ops.append(check_op(op, counts[op], lambda n=node: _import_single_aten(n),
                                   target, repro_root))
    return _with_whole_model(report, lambda: torch_mlir.import_program(program), target,
                             target.lowering)


def _with_whole_model(report: CheckReport, make_module, target: Target,
                      lowerings: tuple[str, ...]) -> CheckReport:
    """Fill in the whole-model verdict per lowering and what `lowering: auto` would use."""
    report.whole_model = _whole_model(make_module, target, lowerings)
    report.chosen = next((lw for lw in lowerings if report.whole_model.get(lw)), None)
    return report


def _whole_model(make_module, target: Target, lowerings: tuple[str, ...]) -> dict[str, bool]:
    """Does the whole model lower and compile through each lowering? `make_module` gives the
    torch-backend module, or for ONNX (ONNX form, torch-backend form) as the build uses them."""
    result: dict[str, bool] = {}
    try:
        imported = make_module()
    except torch_mlir.LowerFailure:
        return {lw: False for lw in lowerings}
    onnx_form, imported = imported if isinstance(imported, tuple) else (None, imported)
    for lowering in lowerings:
        onnx_torch = onnx_form is not None and lowering == "torch"
        try:
            module = onnx_form if onnx_torch else torch_mlir.lower(imported, lowering)
            iree.compile_bytes(module, iree.compile_flags(target, lowering,
                                                          onnx_source=onnx_form is not None))
            result[lowering] = True
        except (torch_mlir.LowerFailure, iree.CompileFailure):
            result[lowering] = False
    return result


def _single_node_model(model, node):
    """A model of one node: its tensor inputs become graph inputs typed from shape inference,
    initializers it reads stay initializers (constant operands such as shapes and axes)."""
    from onnx import helper
    known = {v.name: v for v in [*model.graph.input, *model.graph.value_info,
                                 *model.graph.output]}
    initializers = {t.name: t for t in model.graph.initializer}
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    inputs, inits, nodes = [], [], []
    for name in node.input:
        if not name:
            continue
        if name in initializers:
            inits.append(initializers[name])
        elif name in constants:
            nodes.append(constants[name])
        elif name in known:
            inputs.append(known[name])
        else:
            raise ValueError(f"no shape known for {name!r}")
    outputs = [known[o] if o in known else helper.make_empty_tensor_value_info(o)
               for o in node.output if o]
    graph = helper.make_graph([*nodes, node], f"single_{node.op_type}", inputs, outputs,
                              initializer=inits)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version)
    import onnx
    return onnx.shape_inference.infer_shapes(single)


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "name", None)
    if callable(name):
        return name()                       # e.g. "aten::atan2"
    return getattr(target, "__name__", str(target))


class _OneOp(torch.nn.Module):
    def __init__(self, target, args, kwargs, tensor_slots):
        super().__init__()
        self.target, self.args_template, self.kwargs = target, args, kwargs
        self.tensor_slots = tensor_slots

    def forward(self, *tensors):
        args = list(self.args_template)
        for slot, tensor in zip(self.tensor_slots, tensors):
            args[slot] = tensor
        return self.target(*args, **self.kwargs)


def _import_single_aten(node: torch.fx.Node) -> bytes:
    """One ATen op with example tensors shaped like its operands in the real graph."""
    args, slots, examples = [], [], []
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node):
            val = arg.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise ValueError(f"operand {i} is not a tensor")
            examples.append(_example(val))
            slots.append(i)
            args.append(None)
        elif isinstance(arg, (list, tuple)) and any(isinstance(a, torch.fx.Node) for a in arg):
            raise ValueError("list-of-tensor operands are checked with the whole model")
        else:
            args.append(arg)
    program = torch.export.export(_OneOp(node.target, args, dict(node.kwargs), slots),
                                  tuple(examples))
    return torch_mlir.import_program(program)


def _example(val: torch.Tensor) -> torch.Tensor:
    shape = tuple(int(d) for d in val.shape)
    if val.dtype.is_floating_point:
        return torch.rand(shape, dtype=val.dtype) + 0.5
    if val.dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool)
    return torch.ones(shape, dtype=val.dtype)


_LEGALIZE = re.compile(r"failed to legalize operation '([\w.]+)'(?:[^\n]*?\"(onnx\.\w+)\")?")
_LOC = re.compile(r"^(?:loc\([^)]*\)|[^\s:]+:\d+:\d+):\s*(?:error:\s*)?")


def _first_line(text: str) -> str:
    """The reason in one line: which op could not be legalized, else the first error."""
    legalize = _LEGALIZE.search(text)
    if legalize:
        return f"no lowering for {legalize.group(2) or legalize.group(1)}"
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "failed")
    return _LOC.sub("", line)[:160]


def fresh_repro_dir(base: Path) -> Path:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    return base




def run_check(model: str, target_name: str = "host", out: Path | None = None) -> CheckReport:
    """MODEL: an .onnx or .pt2 file, a recipe .yaml, or 'package.module:factory'."""
    from edgekit.config.profiles import load_target
    from edgekit.config.recipe import Recipe, load_recipe
    from edgekit.pipeline.export import export_model
    from edgekit.pipeline.load import load_model
    from edgekit.pipeline.onnx_source import load_onnx
    from edgekit.pipeline.onnx_source import onnx_digest
    target = load_target(target_name)
    stem = Path(model.split(":")[0]).stem or "model"
    repro = fresh_repro_dir((out or Path("build")) / f"check-{stem}-{target.name}")
    if model.endswith(".onnx"):
        proto = load_onnx(Path(model))
        return remember(check_onnx(proto, model, target, repro), onnx_digest(proto), target)
    if model.endswith(".pt2"):
        recipe = Recipe.model_validate({"name": stem, "model": {"exported": model}})
    elif model.endswith((".yaml", ".yml")):
        recipe = load_recipe(model)
    else:
        recipe = Recipe.model_validate({"name": "check", "model": {"python": model}})
    exported = export_model(recipe, load_model(recipe))
    if not isinstance(exported.program, torch.export.ExportedProgram):
        report = check_onnx(exported.program, model, target, repro)
    else:
        report = check_program(exported.program, model, target, repro)
    return remember(report, exported.digest, target)


def _store(digest: str, target: Target) -> Path:
    from edgekit.config.paths import cache_root
    from edgekit.pipeline.cache import cache_key
    key = cache_key({"model": digest, "target": target.model_dump(mode="json",
                                                                   exclude={"source"})})
    return cache_root() / "check" / f"{key}.json"


def remember(report: CheckReport, digest: str, target: Target) -> CheckReport:
    """Keep what check learned, so `lowering: auto` starts with the lowering that works."""
    path = _store(digest, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    failing = {lw: [s.op for s in report.ops if getattr(s, lw) is False]
               for lw in ("tosa", "linalg")}
    path.write_text(json.dumps({"chosen": report.chosen, "whole_model": report.whole_model,
                                "failing_ops": failing}))
    return report


def learned_lowering(digest: str, target: Target) -> tuple[str, str] | None:
    """(lowering, why) from an earlier `edgekit check` of this model for this target."""
    path = _store(digest, target)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    chosen = data.get("chosen")
    if not chosen:
        return None
    skipped = [lw for lw in target.lowering[: target.lowering.index(chosen)]
               if chosen in target.lowering]
    why = "; ".join(f"{lw} fails on {', '.join(data['failing_ops'].get(lw, [])) or 'the model'}"
                    for lw in skipped)
    return chosen, f"edgekit check chose {chosen}" + (f" ({why})" if why else "")
