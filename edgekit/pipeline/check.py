"""`edgekit check MODEL --target T`: which operators make it through import, TOSA, Linalg and
the target's compiler — per operator type, on the smallest module that holds one instance of it.

The model's frontend names the op types (for ONNX the graph's node types; for PyTorch, the ATen
ops of the exported graph) and cuts each out with its real input shapes (constant operands stay
constants, so a Reshape keeps its shape); each is taken through the stages separately, so one
unsupported op does not hide the others. A failing op's module is saved as its reproducer.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.config.profiles import Target, load_target
from edgekit.config.recipe import Recipe, load_recipe
from edgekit.pipeline.cache import cache_key
from edgekit.pipeline.frontends.base import Frontend
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.lower import ImportedGraph, save_reproducer
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
    kind: str                          # the frontend's: "onnx" or "pytorch"
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


def check_graph(frontend: Frontend, graph, model_path: str, target: Target,
                repro_root: Path) -> CheckReport:
    """Each op type of the frontend's graph, then the whole model through the lowerings a
    build would try."""
    report = CheckReport(model=model_path, kind=frontend.kind, target=target.name)
    for op in frontend.op_modules(graph):
        report.ops.append(check_op(op.op, op.count, op.make, target, repro_root))
    scope = frontend.check_scope(graph, target, model_path)
    report.note = scope.note
    if not scope.lowerings:  # the build refuses the model, whatever compiles
        return report
    return _with_whole_model(report, lambda: frontend.import_graph(graph), target,
                             scope.lowerings)


def _with_whole_model(report: CheckReport, make_module: Callable[[], ImportedGraph],
                      target: Target, lowerings: tuple[str, ...]) -> CheckReport:
    """Fill in the whole-model verdict per lowering and what `lowering: auto` would use."""
    report.whole_model = _whole_model(make_module, target, lowerings)
    report.chosen = next((lw for lw in lowerings if report.whole_model.get(lw)), None)
    return report


def _whole_model(make_module: Callable[[], ImportedGraph], target: Target,
                 lowerings: tuple[str, ...]) -> dict[str, bool]:
    """Does the whole model lower and compile through each lowering, as the build takes it?"""
    result: dict[str, bool] = {}
    try:
        imported = make_module()
    except torch_mlir.LowerFailure:
        return {lw: False for lw in lowerings}
    for lowering in lowerings:
        try:
            lowered = imported.lowered(lowering)
            iree.compile_bytes(lowered.module, iree.compile_flags(
                target, lowering, input_type=lowered.input_type))
            result[lowering] = True
        except (torch_mlir.LowerFailure, iree.CompileFailure):
            result[lowering] = False
    return result


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




# the recipe's `model:` field for a MODEL file; anything else is 'package.module:factory'
_SOURCE_BY_SUFFIX = {".onnx": "onnx", ".pt2": "exported"}


def run_check(model: str, target_name: str = "host", out: Path | None = None,
              trust_pickle: bool = False) -> CheckReport:
    """MODEL: an .onnx or .pt2 file, a recipe .yaml, or 'package.module:factory'. A .pt2 is
    loaded only with `trust_pickle` (or the recipe's `model.trust_pickle`): it is unpickled."""
    target = load_target(target_name)
    stem = Path(model.split(":")[0]).stem or "model"
    repro = fresh_repro_dir((out or Path("build")) / f"check-{stem}-{target.name}")
    if model.endswith((".yaml", ".yml")):
        recipe = load_recipe(model)
    else:
        source = _SOURCE_BY_SUFFIX.get(Path(model).suffix, "python")
        recipe = Recipe.model_validate({"name": "check", "model": {source: model}})
    if trust_pickle:
        recipe = recipe.trusting_pickle()
    frontend = frontend_for(recipe.model)
    graph, digest = frontend.graph_to_check(recipe)
    return remember(check_graph(frontend, graph, model, target, repro), digest, target)


def _store(digest: str, target: Target) -> Path:
    key = cache_key({"model": digest, "target": target.fingerprint()})
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
