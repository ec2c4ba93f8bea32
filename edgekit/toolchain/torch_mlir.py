"""torch-mlir: import an ExportedProgram once, then lower it to TOSA, Linalg or keep torch.

The only module that imports torch_mlir. Modules cross this boundary as MLIR bytecode (compact,
and the form IREE 3.13 parses from torch-mlir's TOSA — the pretty text does not; facts.md).
"""

from __future__ import annotations

import io
import re

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


def import_program(program: torch.export.ExportedProgram) -> bytes:
    """ExportedProgram → torch-backend MLIR bytecode (weights inlined as resources)."""
    from torch_mlir import fx
    from torch_mlir.extras.fx_importer import FxImporter
    context, diagnostics = _context_collecting_diagnostics()
    try:
        module = fx.export_and_import(program, output_type="torch", func_name="main",
                                      fx_importer=FxImporter(context=context),
                                      decomposition_table=_decompositions())
    except Exception as exc:  # torch-mlir raises bare Exceptions; translate them here
        text = "\n".join(diagnostics) or str(exc)
        raise LowerFailure(_ops_in(text), text) from None
    return _bytecode(module)


def lower(torch_bytecode: bytes, lowering: str) -> bytes:
    """torch-backend bytecode → bytecode in the lowering's dialect (tosa, linalg or torch)."""
    if lowering == "torch":
        return torch_bytecode
    from torch_mlir import ir
    from torch_mlir.compiler_utils import OutputType, lower_mlir_module
    context, diagnostics = _context_collecting_diagnostics()
    with context:
        try:
            module = ir.Module.parse(torch_bytecode)
            lower_mlir_module(False, OutputType.get(OUTPUT_TYPE[lowering]), module)
        except Exception as exc:  # torch-mlir raises bare Exceptions; translate them here
            text = "\n".join(diagnostics) or str(exc)
            raise LowerFailure(_ops_in(text), text) from None
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
        diagnostics.append(f"{diagnostic.location}: {diagnostic.message}")
        return True

    context.attach_diagnostic_handler(collect)
    return context, diagnostics


def to_text(bytecode: bytes) -> str:
    """Generic-form MLIR text of a bytecode module (for reproducers people can read)."""
    from torch_mlir import ir
    context, _ = _context_collecting_diagnostics()
    with context:
        module = ir.Module.parse(bytecode)
        return module.operation.get_asm(print_generic_op_form=True, large_elements_limit=16)


def _bytecode(module) -> bytes:
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


_OP = re.compile(r"(?:failed to legalize operation |unsupported op |op )'?((?:torch|tosa|aten)"
                 r"\.[\w.]+)'?")


def _ops_in(text: str) -> tuple[str, ...]:
    ops: list[str] = []
    for name in _OP.findall(text):
        if name not in ops:
            ops.append(name)
    return tuple(ops)
