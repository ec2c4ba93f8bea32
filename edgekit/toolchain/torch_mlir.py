"""torch-mlir: import an ExportedProgram once, then lower it to TOSA, Linalg or keep torch.

The only module that imports torch_mlir. Modules cross this boundary as MLIR bytecode (compact,
and the form IREE 3.13 parses from torch-mlir's TOSA — the pretty text does not; facts.md).
"""

from __future__ import annotations

import faulthandler
import io
import os
import re
from pathlib import Path

import torch

# What torch-mlir calls each lowering.
OUTPUT_TYPE = {"tosa": "tosa", "linalg": "linalg-on-tensors", "torch": "torch"}


class LowerFailure(Exception):
    """torch-mlir could not import or lower: the ops its diagnostics name, and the text."""

    def __init__(self, ops: tuple[str, ...], diagnostics: str):
        super().__init__(diagnostics)
        self.ops = ops
        self.diagnostics = diagnostics


def _decompositions() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    # torch-mlir decomposes layer_norm into f64 math that IREE's TOSA input rejects; keeping
    # aten.native_layer_norm whole lets every lowering handle it natively (facts.md).
    return {op: fn for op, fn in get_decomposition_table().items()
            if "native_layer_norm" not in str(op)}


def decompositions_of(ops) -> dict:
    """The import's own decompositions of `ops` (those it has): for a rewrite that must see
    inside an op before the import does (pipeline/rewrite_tosa.py)."""
    table = _decompositions()
    return {op: table[op] for op in ops if op in table}


def decompose(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The program as torch-mlir imports it: a decomposed copy (the ATen ops `check` lists)."""
    return program.run_decompositions(_decompositions())


def import_program(program: torch.export.ExportedProgram,
                   decomposed: torch.export.ExportedProgram | None = None,
                   more: tuple[tuple[str, torch.export.ExportedProgram], ...] = ()) -> bytes:
    """ExportedProgram → torch-backend MLIR bytecode (weights inlined as resources), its
    function `main`. `decomposed`: `decompose(program)` when the caller made it already (it is
    consumed: the import replaces its weight placeholders with the tensors). `more`: further
    (name, program) functions of the same module (an LLM's decode beside its prefill)."""
    from torch_mlir import fx
    from torch_mlir.extras.fx_importer import FxImporter
    context, diagnostics = _context_collecting_diagnostics()
    try:
        decomposed = _with_all_state(decomposed if decomposed is not None else
                                     decompose(program))
        importer = FxImporter(context=context, hooks=_weights_as_raw_bytes())
        _name_locations(importer)
        for name, other in more:   # imported first: export_and_import lowers the whole module
            importer.import_frozen_program(_with_all_state(decompose(other)), func_name=name)
        module = fx.export_and_import(decomposed, output_type="torch", func_name="main",
                                      fx_importer=importer, decomposition_table={})
    except Exception as exc:  # torch-mlir raises bare Exceptions; translate them here
        text = "\n".join(diagnostics) or f"error: {type(exc).__name__}: {exc}"
        raise LowerFailure(ops_in(text), text) from None
    return _bytecode(module)


def _name_locations(importer) -> None:
    """Every op's MLIR location named after its FX node: `aten op @ module.path`, around the
    source location torch-mlir gives it. A compiler's diagnostic then says where in the model
    the op it refuses came from, through every lowering (locations travel with rewritten ops).
    """
    from torch_mlir.extras.fx_importer import ContextCache
    from torch_mlir.ir import Location

    class NamedLocations(ContextCache):
        def get_node_location(self, node):
            loc = super().get_node_location(node)
            if node.op != "call_function":
                return loc
            stack = node.meta.get("nn_module_stack") or {}
            path = next(reversed(stack.values()))[0] if stack else ""
            name = f"{_op_name(node)} @ {path or 'forward'}"
            return Location.name(name, childLoc=loc, context=self._c) if loc is not None \
                else Location.name(name, context=self._c)

    importer._cc = NamedLocations(importer._c, py_attr_tracker=importer._py_attr_tracker)


def _op_name(node) -> str:
    """`aten.conv2d` for torch.ops.aten.conv2d.default; the target's name otherwise."""
    name = str(node.target)
    return name[: -len(".default")] if name.endswith(".default") else name


def _with_all_state(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The program (a copy made by run_decompositions) with its non-persistent buffers in its
    state dict as well, where torch-mlir's frozen import looks every buffer up.

    torch.export keeps `register_buffer(..., persistent=False)` tensors (e.g. every
    `transformers` BERT's position_ids) in `constants`, not `state_dict`; torch-mlir then stops
    with "Could not find state mapping for buffer" (llvm/torch-mlir#4744). Lifted tensor
    constants it already reads from `constants`.
    """
    buffers = program.graph_signature.inputs_to_buffers.values()
    missing = {name: program.constants[name] for name in buffers
               if name not in program.state_dict and name in program.constants}
    if missing:
        program._state_dict = {**program.state_dict, **missing}
    return program


def import_onnx(model) -> bytes:
    """ONNX ModelProto (shapes inferred) → torch-backend MLIR bytecode, entry renamed `main`."""
    return onnx_to_torch_backend(import_onnx_form(model))


def import_onnx_form(model) -> bytes:
    """The ONNX import as IREE's own ONNX input takes it (`torch.operator "onnx.*"`, entry
    `main`), made in a child process: an importer crash is a LowerFailure with its signal."""
    return in_child(_import_onnx_form, model, what="torch-mlir's ONNX importer")


def onnx_to_torch_backend(onnx_form: bytes) -> bytes:
    """torch-mlir's ONNX→torch conversion (`torch-onnx-to-torch-backend-pipeline`): the form
    the tosa and linalg lowerings start from. In a child process (it has segfaulted on
    conformance models): a crash is a LowerFailure with its signal."""
    return in_child(_onnx_to_torch_backend, onnx_form,
                    what="torch-mlir's ONNX→torch conversion")


def _import_onnx_form(model) -> bytes:
    from torch_mlir import ir
    from torch_mlir.extras import onnx_importer
    context, diagnostics = _context_collecting_diagnostics()
    try:
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=context).operation
        onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
        with context:
            # the graph's function (the public one): ONNX local functions (MVN, …) are
            # imported as private functions beside it and keep their names
            for op in module.regions[0].blocks[0].operations:
                if op.operation.name == "func.func" and \
                        "sym_visibility" not in op.operation.attributes:
                    op.operation.attributes["sym_name"] = ir.StringAttr.get("main")
            _views_as_dtype(module)
            return _bytecode(module)
    except Exception as exc:  # the importer raises bare Exceptions; translate them here
        text = "\n".join(diagnostics) or f"{type(exc).__name__}: {exc}"
        raise LowerFailure(ops_in(text), text) from None


# An ONNX node edgekit adds (frontends/onnx_int8.py) for what ONNX cannot say: the same bytes
# as another integer type with a different last dimension (PyTorch's `Tensor.view(dtype)`).
VIEW_DTYPE = "EdgekitViewDtype"
_TORCH_DTYPES = {"si8": 1, "ui8": 0, "si32": 3, "si64": 4}


def _views_as_dtype(module) -> None:
    """Each imported `onnx.EdgekitViewDtype` as `torch.aten.view.dtype` (which IREE lowers
    to a bitcast: a dispatch boundary, and a gather of 4- or 8-byte words)."""
    from torch_mlir import ir
    found = []

    def visit(op):
        if op.name == "torch.operator" and \
                ir.StringAttr(op.attributes["name"]).value == f"onnx.{VIEW_DTYPE}":
            found.append(op)
        return ir.WalkResult.ADVANCE
    module.walk(visit)
    for op in found:
        result = op.results[0]
        element = str(result.type).rsplit(",", 1)[-1].rstrip(">")
        at = ir.InsertionPoint(op)
        dtype = ir.Operation.create(
            "torch.constant.int", results=[ir.Type.parse("!torch.int")],
            attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                    _TORCH_DTYPES[element])},
            loc=op.location, ip=at)
        view = ir.Operation.create("torch.aten.view.dtype", results=[result.type],
                                   operands=[op.operands[0], dtype.result], loc=op.location,
                                   ip=at)
        result.replace_all_uses_with(view.result)
        op.erase()


def _onnx_to_torch_backend(onnx_form: bytes) -> bytes:
    from torch_mlir import ir
    from torch_mlir.passmanager import PassManager
    context, diagnostics = _context_collecting_diagnostics()
    with context:
        try:
            module = ir.Module.parse(onnx_form)
            PassManager.parse("builtin.module(torch-onnx-to-torch-backend-pipeline)").run(
                module.operation)
        except Exception as exc:  # torch-mlir raises bare Exceptions; translate them here
            text = "\n".join(diagnostics) or f"{type(exc).__name__}: {exc}"
            raise LowerFailure(ops_in(text), text) from None
        return _bytecode(module)


# A child that has not answered by then is killed: a hung conversion is a failed attempt (the
# next path is tried), not a build that never ends. Same order as a tool run (runner.py).
CHILD_DEADLINE_S = 1800.0


def in_child(fn, *args, what: str, deadline_s: float | None = None) -> bytes:
    """fn(*args) → bytes, run in a forked child (cheap: torch-mlir is imported already).
    A LowerFailure comes back as one; a crash (signal), an exit without a result or no answer
    within deadline_s (EDGEKIT_CHILD_DEADLINE_S, default CHILD_DEADLINE_S) becomes a
    LowerFailure naming the cause and the child's last stderr line. Without fork (or with
    EDGEKIT_NO_FORK=1) fn runs here."""
    if not hasattr(os, "fork") or os.environ.get("EDGEKIT_NO_FORK", "") not in ("", "0"):
        return fn(*args)
    import json
    import signal
    import sys
    import tempfile
    _preload()   # imported here once, not again in every child (~0.8 s each)
    with tempfile.TemporaryFile() as stderr:
        read_fd, write_fd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            os.dup2(stderr.fileno(), 2)
            faulthandler.disable()   # its crash is reported by the parent, in one line
            try:
                payload = b"ok" + fn(*args)
            except LowerFailure as failure:
                payload = b"lf" + json.dumps([failure.ops, failure.diagnostics]).encode()
            except BaseException as exc:  # anything else: a failure with its type, not a hang
                payload = b"lf" + json.dumps([[], f"{type(exc).__name__}: {exc}"]).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(payload)
            os._exit(0)
        os.close(write_fd)
        data, timed_out = _read_until(read_fd, _deadline(deadline_s))
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if timed_out:
            text = f"{what} gave no answer within {_deadline(deadline_s):.0f} s (killed)"
            raise LowerFailure(ops_in(text), text)
        if data[:2] == b"ok" and os.WIFEXITED(status):
            return data[2:]
        if data[:2] == b"lf":
            ops, diagnostics = json.loads(data[2:])
            raise LowerFailure(tuple(ops), diagnostics)
        stderr.seek(0)
        lines = [ln.strip() for ln in stderr.read().decode(errors="replace").splitlines()
                 if ln.strip()]
        last = f": {lines[-1][:200]}" if lines else ""
        cause = (f"crashed with {signal.Signals(os.WTERMSIG(status)).name}"
                 if os.WIFSIGNALED(status) else
                 f"exited with status {os.WEXITSTATUS(status)} without a result")
        text = f"{what} {cause}{last}"
        raise LowerFailure(ops_in(text), text)


def _deadline(deadline_s: float | None) -> float:
    if deadline_s is not None:
        return deadline_s
    try:
        return float(os.environ.get("EDGEKIT_CHILD_DEADLINE_S", "") or CHILD_DEADLINE_S)
    except ValueError:
        return CHILD_DEADLINE_S


def _read_until(fd: int, seconds: float) -> tuple[bytes, bool]:
    """Everything the child writes to fd until it closes it → (data, False); (data so far,
    True) when `seconds` pass first."""
    import select
    import time
    end = time.monotonic() + seconds
    chunks = []
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return b"".join(chunks), True
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
    finally:
        os.close(fd)


def _preload() -> None:
    import torch_mlir.dialects.torch  # noqa: F401
    import torch_mlir.extras.onnx_importer  # noqa: F401
    import torch_mlir.ir  # noqa: F401
    import torch_mlir.passmanager  # noqa: F401


def _weights_as_raw_bytes():
    """Importer hooks that turn weight tensors into MLIR resources from their raw bytes.

    torch-mlir's default goes through `Tensor.tolist()` (a Python float per element): ~12 s of a
    MobileNetV2's 224x224 import. The bytes, and so the module, are the same (a test compares).
    """
    import numpy as np
    from torch_mlir.extras.fx_importer import FxImporterHooks, create_mlir_tensor_type
    from torch_mlir.ir import DenseResourceElementsAttr, Operation

    numpy_dtypes = {torch.float32, torch.float16, torch.float64, torch.int8, torch.uint8,
                    torch.int16, torch.int32, torch.int64}

    class RawBytesWeights(FxImporterHooks):
        def __init__(self):
            self._attrs: dict[int, tuple[torch.Tensor, object]] = {}  # keeps tensors alive

        def resolve_literal(self, gni, literal, info):
            if not (isinstance(literal, torch.Tensor) and literal.dtype in numpy_dtypes
                    and literal.numel() > 1):
                return None  # scalars (splat attributes) and bf16: torch-mlir's own path
            cached = self._attrs.get(id(literal))
            if cached is None:
                try:
                    array = np.ascontiguousarray(literal.detach().cpu().numpy())
                except (RuntimeError, TypeError):  # fake or meta tensor: no bytes to take
                    return None
                shape = "_".join(str(d) for d in literal.shape)
                attr = DenseResourceElementsAttr.get_from_buffer(
                    array, f"torch_tensor_{shape}_{literal.dtype}",
                    create_mlir_tensor_type(literal))
                cached = self._attrs[id(literal)] = (literal, attr)
            return Operation.create(name="torch.vtensor.literal",
                                    results=[gni._cc.tensor_to_vtensor_type(literal)],
                                    attributes={"value": cached[1]}).result

    return RawBytesWeights()


def lower(torch_bytecode: bytes, lowering: str) -> bytes:
    """torch-backend bytecode → bytecode in the lowering's dialect (tosa, linalg or torch), in
    a child process: the pipeline has died of SIGFPE on a conformance model (Reshape of an
    empty tensor); a crash is a LowerFailure with its signal, and the next lowering is tried."""
    if lowering == "torch":
        return torch_bytecode
    return in_child(_lower, torch_bytecode, lowering, what=f"torch-mlir's {lowering} lowering")


def _lower(torch_bytecode: bytes, lowering: str) -> bytes:
    from torch_mlir import ir
    from torch_mlir.compiler_utils import OutputType, lower_mlir_module
    context, diagnostics = _context_collecting_diagnostics()
    with context:
        try:
            module = ir.Module.parse(torch_bytecode)
            lower_mlir_module(False, OutputType.get(OUTPUT_TYPE[lowering]), module)
        except Exception as exc:  # torch-mlir raises bare Exceptions; translate them here
            text = "\n".join(diagnostics) or str(exc)
            raise LowerFailure(ops_in(text), text) from None
        return _bytecode(module)


def _context_collecting_diagnostics():
    """An MLIR context with the torch dialect whose error diagnostics land in a list (they
    would otherwise go to stderr and the exception would say only 'pipeline failed')."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    context = ir.Context()
    torch_d.register_dialect(context)
    diagnostics: list[str] = []

    def collect(diagnostic) -> bool:
        severity = str(diagnostic.severity).rsplit(".", 1)[-1].lower()
        diagnostics.append(f"{diagnostic.location}: {severity}: {diagnostic.message}")
        diagnostics.extend(f"{note.location}: note: {note.message}" for note in diagnostic.notes)
        return True

    context.attach_diagnostic_handler(collect)
    return context, diagnostics


def to_text(bytecode: bytes, debug_info: bool = False) -> str:
    """Generic-form MLIR text of a bytecode module (for reproducers people can read)."""
    from torch_mlir import ir
    context, _ = _context_collecting_diagnostics()
    with context:
        try:
            module = ir.Module.parse(bytecode)
        except Exception as exc:  # an unparsable module still leaves a reproducer
            return f"// the module does not parse: {' '.join(str(exc).split())[:400]}\n"
        return module.operation.get_asm(print_generic_op_form=True, large_elements_limit=16,
                                        enable_debug_info=debug_info,
                                        use_local_scope=debug_info)


def _bytecode(module) -> bytes:
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


# --- diagnostics: what failed, where in the model, and the compiler's reason, in one line -----

_ERROR = re.compile(r"^(?P<loc>.*?):?\s*error:\s*(?P<msg>.*)$|^(?P<loc2>loc\(.*?\)): (?P<msg2>.*)$")
_NAMED = re.compile(r'loc\("(?P<name>[^"]+ @ [^"]+)"')
_FILE_LINE = re.compile(r'"?(?P<file>[^"\s()]+\.py)"?:(?P<line>\d+)')
_MLIR_OP = re.compile(r"'((?:tosa|linalg|torch|arith|tensor|func|flow|stream|hal|iree\w*|onnx|"
                      r"math|vector|memref|scf|util)\.[\w.]+)' op\b")


class Diagnosis:
    """A compiler failure in one line: the op it refused, where that op came from in the model
    (`aten op @ module.path`, and the source line), and the compiler's own reason."""

    def __init__(self, op: str, where: str, reason: str):
        self.op, self.where, self.reason = op, where, reason

    def line(self) -> str:
        head = " ".join(filter(None, (self.op, f"({self.where})" if self.where else "")))
        return f"{head}: {self.reason}" if head else self.reason


def diagnose(text: str, module: bytes | None = None) -> Diagnosis:
    """The first error of `text` (torch-mlir's or iree-compile's diagnostics). iree-compile
    prints only file:line locations; with the `module` it read, they are mapped back to the
    named locations the importer gave the ops."""
    for raw in text.splitlines():
        match = _ERROR.match(raw.strip())
        if not match:
            continue
        loc = match.group("loc") or match.group("loc2") or ""
        message = (match.group("msg") or match.group("msg2") or "").strip()
        op = _MLIR_OP.search(message)
        legalize = re.search(r"failed to legalize operation '([\w.]+)'", message)
        op_name = (legalize or op).group(1) if (legalize or op) else ""
        return Diagnosis(op_name, _where(loc, module), _clip(message))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return Diagnosis("", "", _clip(lines[0] if lines else "failed, with no diagnostics"))


def _where(loc: str, module: bytes | None) -> str:
    named = _NAMED.search(loc)
    source = _FILE_LINE.search(loc)
    line = f"{Path(source.group('file')).name}:{source.group('line')}" if source else ""
    name = named.group("name") if named else None
    if name is None and source and module is not None:
        name = location_names(module).get(f"{source.group('file')}:{source.group('line')}")
    return ", ".join(filter(None, (name, line)))


def location_names(module: bytes) -> dict[str, str]:
    """file:line → the first `aten op @ module.path` the importer named at that line."""
    text = to_text(module, debug_info=True)
    names: dict[str, str] = {}
    for match in re.finditer(r'loc\("([^"]+ @ [^"]+)"\((?:callsite\()?"([^"]+)":(\d+)', text):
        names.setdefault(f"{match.group(2)}:{match.group(3)}", match.group(1))
    return names


def _clip(message: str, limit: int = 240) -> str:
    message = re.sub(r":\s*%[\w#]+ = .*$", "", message)  # the op's printed form, not a reason
    return message if len(message) <= limit else message[: limit - 1] + "…"


_OP = re.compile(r"(?:failed to legalize operation |unsupported op |op )'?((?:torch|tosa|aten)"
                 r"\.[\w.]+)'?|\"(onnx\.\w+)\"")


def ops_in(text: str) -> tuple[str, ...]:
    ops: list[str] = []
    for groups in _OP.findall(text):
        name = next(g for g in groups if g)
        if name not in ops:
            ops.append(name)
    for line in text.splitlines():  # "'tosa.cast' op is not profile-aligned: …"
        if "error" in line:
            for name in _MLIR_OP.findall(line):
                if name not in ops:
                    ops.append(name)
    if any(op.startswith("onnx.") for op in ops):  # the ONNX op says more than its carrier
        ops = [op for op in ops if op != "torch.operator"]
    return tuple(ops)
