"""`edgekit check MODEL --target T`: which operators make it through import, TOSA, Linalg and
the target's compiler, and which lowering a build would use.

The whole model goes first, as a build takes it: import once, then the target's lowerings in
order until one lowers and compiles. When that works, every op is known to work through it and
nothing is cut out (so `check` costs about one build). Only the ops that a failing stage names
(the compiler's diagnostics, mapped back to the model's op types) are cut out, each with its
real input shapes, and taken through the stages separately, so one unsupported op does not hide
the others. An op's verdict for a stage the whole model failed in comes from that failure (with
the whole model's reproducer), never from the op compiled alone: alone it may pass (the failing
cast sits between two ops; a constant comes from elsewhere), and "passes" would be wrong. When a
failure names no op type, every op is checked on its own.

Before any of that, the model goes through the build's own front stages (load, export,
quantize, the golden check): a model a build refuses there (uninformative golden outputs,
inputs to declare) is not buildable, whatever lowers.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.config.profiles import Target, load_target
from edgekit.config.recipe import Recipe, load_recipe
from edgekit.errors import EdgekitError
from edgekit.pipeline.cache import cache_key
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.base import Frontend, OpModule
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.lower import ImportedGraph, save_reproducer
from edgekit.toolchain import iree, torch_mlir

Progress = Callable[[str], None]


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
    # stage ("import", or the lowering) → the whole model's failure there, in one line
    failures: dict[str, str] = field(default_factory=dict)
    chosen: str | None = None          # what `lowering: auto` would use
    note: str = ""                     # quantized ONNX models: the path they take, or refusal
    # the build's refusal before anything lowers ("check golden: golden output …"), one line
    refused: str = ""

    @property
    def buildable(self) -> bool:
        return self.chosen is not None and not self.refused


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
                repro_root: Path, on_progress: Progress | None = None) -> CheckReport:
    """The whole model through the lowerings a build would try, then, separately, only the op
    types that a failing stage names."""
    say = on_progress or (lambda _: None)
    report = CheckReport(model=model_path, kind=frontend.kind, target=target.name)
    ops = frontend.op_modules(graph)
    scope = frontend.check_scope(graph, target, model_path)
    report.note = scope.note
    if not scope.lowerings:  # the build refuses the model, whatever compiles: ops on their own
        return _with_ops(report, ops, named=set(), target=target, repro_root=repro_root,
                         say=say, passed=None, every_op=True)
    say(f"whole model: import ({len(ops)} op types)")
    try:
        imported = frontend.import_graph(graph)
    except torch_mlir.LowerFailure as failure:
        report.failures["import"] = torch_mlir.diagnose(failure.diagnostics).line()
        where = repro_root / "whole-model" / "import"
        save_reproducer(where, None, failure.diagnostics)
        report.whole_model = {lw: False for lw in scope.lowerings}
        named = _named_ops(failure.diagnostics)
        return _blamed(_with_ops(report, ops, named=named, target=target,
                                 repro_root=repro_root, say=say, passed=None),
                       {"import": (named, where)})
    blame: dict[str, tuple[set[str], Path]] = {}
    for lowering in scope.lowerings:
        say(f"whole model: {lowering}")
        text, module, command = _whole_model_attempt(imported, lowering, target)
        report.whole_model[lowering] = text is None
        if text is None:
            report.chosen = lowering
            break
        report.failures[lowering] = torch_mlir.diagnose(text, module).line()
        where = repro_root / "whole-model" / lowering
        save_reproducer(where, module, text, command)
        blame[lowering] = (_named_ops(text, module), where)
    named = set().union(*(ops_named for ops_named, _ in blame.values()))
    return _blamed(_with_ops(report, ops, named=named, target=target, repro_root=repro_root,
                             say=say, passed=report.chosen), blame)


def _blamed(report: CheckReport, blame: dict[str, tuple[set[str], Path]]) -> CheckReport:
    """Each stage the whole model failed in decides that stage's verdict: the ops its failure
    names fail it (its line first, the whole model's reproducer); an op that passed it only when
    compiled alone is unknown there (None), not passing."""
    for stage, (named, where) in blame.items():
        column = {"import": "imported", "tosa": "tosa", "linalg": "linalg"}.get(stage)
        for status in report.ops:
            if _norm(status.op) in named:
                if column:
                    setattr(status, column, False)
                status.failure = f"{stage} (whole model): {report.failures[stage]}"
                status.reproducer = str(where)
            elif column in ("tosa", "linalg") and getattr(status, column):
                setattr(status, column, None)
    return report


def _whole_model_attempt(imported: ImportedGraph, lowering: str, target: Target
                         ) -> tuple[str | None, bytes | None, str | None]:
    """(None, module, None) when the lowering lowers and compiles; else (diagnostics, the module
    that failed: the lowered one for a compile failure, the import for a lowering's, and the
    command that reproduces it, as a build's reproducer has them)."""
    try:
        lowered = imported.lowered(lowering)
    except torch_mlir.LowerFailure as failure:
        module, command = imported.failed_input(lowering)
        return failure.diagnostics, module, command
    flags = iree.compile_flags(target, lowering, input_type=lowered.input_type)
    try:
        iree.compile_bytes(lowered.module, flags)
    except iree.CompileFailure as failure:
        return failure.diagnostics, lowered.module, shlex.join(
            ["iree-compile", "input.mlirbc", *flags, "-o", "module.vmfb"])
    return None, lowered.module, None


def _with_ops(report: CheckReport, ops: list[OpModule], *, named: set[str], target: Target,
              repro_root: Path, say: Progress, passed: str | None,
              every_op: bool = False) -> CheckReport:
    """One row per op type: through `passed` (the lowering the whole model took) every op
    works; the op types that failures name are checked on their own; when a stage failed
    and named no op type of the graph, all of them are."""
    failed = bool(report.failures)
    suspects = [op for op in ops if _norm(op.op) in named] if failed else []
    if (failed and not suspects) or every_op:
        suspects = list(ops)
    checked: dict[str, OpStatus] = {}
    for i, op in enumerate(suspects, 1):
        say(f"op {i}/{len(suspects)}: {op.op}")
        checked[op.op] = check_op(op.op, op.count, op.make, target, repro_root)
    for op in ops:
        status = checked.get(op.op) or OpStatus(op=op.op, count=op.count)
        if passed is not None:
            status.imported = status.imported if op.op in checked else True
            if passed in ("tosa", "linalg") and getattr(status, passed) is None:
                setattr(status, passed, True)
            status.compiled = True if op.op not in checked else status.compiled
        report.ops.append(status)
    return report


def _named_ops(text: str, module: bytes | None = None) -> set[str]:
    """The op types that a failure's error lines name: MLIR ops (`torch.aten.acos`) and the
    ATen ops the importer named the locations after (`aten.where.self @ encoder.layer.0`)."""
    names = {_norm(op) for op in torch_mlir.ops_in(text)}
    for line in text.splitlines():
        if "error" not in line:
            continue
        where = torch_mlir.diagnose(line, module).where
        names |= {_norm(n) for n in re.findall(r"(aten\.[\w.]+) @", where)}
    return names


def _norm(op: str) -> str:
    """`aten::max_pool2d_with_indices`, `torch.aten.max_pool2d_with_indices`,
    `aten.max_pool2d_with_indices.default`, ONNX `MaxPool2d`… → one spelling to compare."""
    name = op.lower()
    for prefix in ("torch.", "aten::", "aten.", "onnx."):
        name = name[len(prefix):] if name.startswith(prefix) else name
    return name.split(".")[0]


_LEGALIZE = re.compile(r"failed to legalize operation '([\w.]+)'(?:[^\n]*?\"(onnx\.\w+)\")?")


def _first_line(text: str) -> str:
    """The reason in one line: which op could not be legalized, else the first error."""
    legalize = _LEGALIZE.search(text)
    if legalize:
        return f"no lowering for {legalize.group(2) or legalize.group(1)}"
    return torch_mlir.diagnose(text).line()


def fresh_repro_dir(base: Path) -> Path:
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    return base




# the recipe's `model:` field for a MODEL file; anything else is 'package.module:factory'
_SOURCE_BY_SUFFIX = {".onnx": "onnx", ".pt2": "exported"}


def run_check(model: str, target_name: str = "host", out: Path | None = None,
              trust_pickle: bool = False, on_progress: Progress | None = None) -> CheckReport:
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
    if target.npu is not None:    # per op: NPU, CPU fallback or unsupported (npu/check.py)
        from edgekit.pipeline.npu.check import check_npu
        return check_npu(recipe, model, target, repro, on_progress)
    frontend = frontend_for(recipe.model)
    exported, refusal = _as_a_build(recipe, model)
    # the graph the build lowers (its digest: the one the build's steering asks for), with the
    # rewrites every build makes (TOSA legalisation: pipeline/rewrite_tosa.py); when the
    # build stops before it has one, the frontend's own take on the model
    graph, digest = (frontend.rewrite(exported, ()).program, exported.digest) \
        if exported is not None else frontend.graph_to_check(recipe)
    if not frontend.check_scope(graph, target, model).lowerings:
        refusal = None                # the scope's note says why; NotBuildable, as before
    report = check_graph(frontend, graph, model, target, repro, on_progress)
    if refusal is not None:
        report.refused = refusal.headline()
        report.refusal = refusal      # not a field: the CLI raises it, the JSON has `refused`
    return remember(report, digest, target)


def _as_a_build(recipe: Recipe, model: str) -> tuple[ExportedModel | None, EdgekitError | None]:
    """The build's own front stages on `recipe` (load, export, quantize, then the golden
    check): (the model they export, None) when a build goes on to lower it; (it, the golden
    check's refusal); (None, the refusal) when it stops earlier. The recipe made for a MODEL
    file or factory is no file: a refusal is located at MODEL."""
    from edgekit.pipeline.build import FRONT
    from edgekit.pipeline.stages import run_plan
    exported, refusal = None, None
    try:
        exported = run_plan([s for s in FRONT if s.name != GOLDEN], recipe, recipe, {}, None)
        next(s for s in FRONT if s.name == GOLDEN).run(recipe, exported)
    except EdgekitError as refused:
        if not model.endswith((".yaml", ".yml")) and refused.where == str(recipe.path):
            refused.where = model
        refusal = refused
    return exported, refusal


GOLDEN = "check golden"     # the build's stage that refuses uninformative golden outputs


def _store(digest: str, target: Target) -> Path:
    key = cache_key({"model": digest, "target": target.fingerprint()})
    return cache_root() / "check" / f"{key}.json"


def verdict_path(digest: str, target: Target) -> Path:
    """Where check's verdict for this model and target is kept (read by `build`'s steering)."""
    return _store(digest, target)


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
