"""Stages `import` (torch-mlir, once) and `lower+compile` (per lowering, with fallback).

`lowering: auto` tries the target profile's lowerings in order and keeps the first that both
lowers and compiles; every attempt is recorded. When all fail, the error names the ops and the
stage and points at a reproducer directory with the MLIR that failed.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.profiles import CpuSpec, CpuVariant, Target
from edgekit.errors import LoweringError, QuantizationError
from edgekit.models.bundle import (ContractionCensus, LoweringAttempt, LoweringRecord,
                                   QuantizationNote)
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu.part import NpuPart
from edgekit.toolchain import iree, torch_mlir


@dataclass(frozen=True)
class LoweringSource:
    """What iree-compile reads for one lowering: the module, and the IREE input type it is in."""

    module: bytes
    input_type: str


@dataclass(frozen=True)
class ImportedGraph:
    """torch-mlir's import of a model: the torch-backend form that the tosa/linalg lowerings
    start from (given, or made on first need by `convert`), the lowerings whose module the
    import itself provides, and the lowerings `auto` tries first. Its frontend decides: an ONNX
    model's `torch` lowering is the ONNX import for IREE's own ONNX input, tried first; the
    torch-backend form is torch-mlir's ONNX→torch conversion, made only when tosa or linalg
    need it, so that its failure cannot stop the `torch` lowering."""

    torch_bytecode: bytes | None = None
    provided: Mapping[str, LoweringSource] = field(default_factory=dict)
    convert: Callable[[], bytes] | None = None      # makes torch_bytecode; raises LowerFailure
    convert_command: str = ""                       # reproduces `convert` on `provided` input
    first: tuple[str, ...] = ()                     # `auto` tries these before the profile's
    first_note: str = ""                            # … and says why
    _converted: dict = field(default_factory=dict, compare=False, repr=False)

    def torch_form(self) -> bytes:
        """The torch-backend module; raises torch_mlir.LowerFailure (once made, kept)."""
        if self.torch_bytecode is not None:
            return self.torch_bytecode
        if "done" not in self._converted:
            try:
                self._converted["done"] = self.convert() if self.convert else b""
            except torch_mlir.LowerFailure as failure:
                self._converted["done"] = failure
        done = self._converted["done"]
        if isinstance(done, torch_mlir.LowerFailure):
            raise done
        return done

    def lowered(self, lowering: str) -> LoweringSource:
        """The module for `lowering`; raises torch_mlir.LowerFailure."""
        if lowering in self.provided:
            return self.provided[lowering]
        return LoweringSource(torch_mlir.lower(self.torch_form(), lowering),
                              iree.INPUT_TYPE[lowering])

    def failed_input(self, lowering: str) -> tuple[bytes | None, str]:
        """What to reproduce a failed lowering from, and the command that does it."""
        try:
            module = self.torch_form()
        except torch_mlir.LowerFailure:
            source = next(iter(self.provided.values()), None)
            return (source.module if source else None), self.convert_command
        return module, ("torch-mlir-opt -pass-pipeline='builtin.module(torch-backend-to-"
                        f"{torch_mlir.OUTPUT_TYPE[lowering]}-backend-pipeline)' input.mlirbc")


@dataclass(frozen=True)
class ImportedModule:
    exported: ExportedModel
    graph: ImportedGraph


@dataclass(frozen=True)
class CompiledModule:
    exported: ExportedModel
    vmfb: Path
    flags: tuple[str, ...]
    lowering: LoweringRecord
    source: Path | None = None                    # the lowered MLIR iree-compile read
    quantization: QuantizationNote | None = None  # with the lowering and contraction census
    variants: tuple[tuple[CpuVariant, Path], ...] = ()   # the profile's further CPU modules
    npu: NpuPart | None = None                    # an NPU target's part (pipeline/npu)


# torch-mlir's tosa and linalg outputs dequantize int8 weights and compute in fp32 (facts.md);
# only the torch dialect reaches IREE with the quantize/dequantize ops it turns into int8 math.
INT8_LOWERINGS = ("torch",)


def lowering_order(requested: str, target: Target, quantize_mode: str | None = None
                   ) -> tuple[str, ...]:
    if requested != "auto":
        return (requested,)
    return INT8_LOWERINGS if quantize_mode == "int8" else tuple(target.lowering)


def import_module(exported: ExportedModel, reproducer_dir: Path) -> ImportedModule:
    # further functions of the module (an LLM's decode): only the PyTorch frontend makes them
    more = tuple((f.name, f.program) for f in exported.functions)
    try:
        frontend = exported.frontend
        return ImportedModule(exported, frontend.import_graph(exported.program, more) if more
                              else frontend.import_graph(exported.program))
    except torch_mlir.LowerFailure as failure:
        reproducer_dir.mkdir(parents=True, exist_ok=True)
        (reproducer_dir / "diagnostics.txt").write_text(failure.diagnostics)
        diagnosis = torch_mlir.diagnose(failure.diagnostics)
        raise LoweringError(
            _ops_sentence(failure.ops, "torch-mlir could not import the model") +
            f": {diagnosis.line()}",
            stage=f"import (torch-mlir {exported.frontend.importer} importer)", ops=failure.ops,
            reproducer=str(reproducer_dir),
            hint="rewrite or decompose the op in the model before export" if failure.ops else
                 f"the importer failed on the program, not on an op: see "
                 f"{reproducer_dir / 'diagnostics.txt'}") from None


def lower_and_compile(imported: ImportedModule, target: Target, requested: str,
                      extra_flags: tuple[str, ...], workdir: Path,
                      reproducer_dir: Path,
                      first: tuple[str, str] | None = None) -> CompiledModule:
    """Lower and compile with the requested lowering ('auto': the profile's order, falling
    back on failure, with `first` = (lowering, why) tried first); `extra_flags` come after the
    profile's flags."""
    attempts: list[LoweringAttempt] = []
    extra_flags = (*imported.exported.compile_flags, *extra_flags)   # the recipe's win
    quantization = imported.exported.quantization
    mode = quantization.mode if quantization else None
    order, note = lowering_order(requested, target, mode), ""
    preferred = [lw for lw in imported.graph.first if lw in order]
    if preferred and requested == "auto" and order[:len(preferred)] != tuple(preferred):
        order = (*preferred, *(lw for lw in order if lw not in preferred))
        note = imported.graph.first_note
    if first is not None and requested == "auto" and mode != "int8":
        order = (first[0], *(lw for lw in order if lw != first[0]))
        note = first[1]
    for lowering in order:
        try:
            lowered = imported.graph.lowered(lowering)
        except torch_mlir.LowerFailure as failure:
            module, command = imported.graph.failed_input(lowering)
            attempts.append(_failed(lowering, "lower", failure.ops, failure.diagnostics, module))
            save_reproducer(reproducer_dir / lowering, module, failure.diagnostics, command)
            continue
        source = workdir / f"{lowering}.mlirbc"
        source.write_bytes(lowered.module)
        output = workdir / f"{lowering}.vmfb"
        flags = iree.compile_flags(target, lowering, extra_flags, quantize_mode=mode,
                                   input_type=lowered.input_type)
        try:
            iree.compile_module(source, output, flags)
        except iree.CompileFailure as failure:
            attempts.append(_failed(lowering, "compile", failure.ops, failure.diagnostics,
                                    lowered.module))
            save_reproducer(reproducer_dir / lowering, lowered.module, failure.diagnostics,
                             shlex.join(["iree-compile", "input.mlirbc", *flags,
                                         "-o", "module.vmfb"]))
            continue
        attempts.append(LoweringAttempt(lowering=lowering, ok=True))
        record = LoweringRecord(requested=requested, used=lowering, attempts=tuple(attempts),
                                note="; ".join(filter(None, (note, *imported.exported.rewrites))))
        return CompiledModule(imported.exported, output, flags, record, source=source,
                              quantization=quantization)
    raise _all_failed(attempts, reproducer_dir, int8=mode == "int8")


def compile_variants(compiled: CompiledModule, target: Target, workdir: Path
                     ) -> CompiledModule:
    """The same lowered module compiled for each of the profile's CPU `variants` (flags as the
    baseline's, the target CPU and features swapped)."""
    if not target.variants:
        return compiled
    built = []
    for variant in target.variants:
        output = workdir / f"variant-{variant.name}.vmfb"
        try:
            iree.compile_module(compiled.source, output, variant_flags(compiled.flags,
                                                                       variant.cpu))
        except iree.CompileFailure as failure:
            first = (failure.diagnostics.strip().splitlines() or ["no diagnostics"])[0][:200]
            raise LoweringError(f"variant {variant.name} ({variant.cpu.cpu}) of "
                                f"{target.name} does not compile: {first}",
                                stage="compile variants", ops=failure.ops,
                                hint="drop or change that variant in the profile's "
                                     "`variants:`; the baseline compiled") from None
        built.append((variant, output))
    return dataclasses.replace(compiled, variants=tuple(built))


def variant_flags(flags: tuple[str, ...], cpu: CpuSpec) -> tuple[str, ...]:
    """`flags` with the target CPU (and triple, features) of `cpu` instead of the baseline's.
    Tuned dispatch configurations are dropped: they carry the baseline CPU's target."""
    kept = [f for f in flags if not f.startswith(("--iree-llvmcpu-target-cpu=",
                                                  "--iree-llvmcpu-target-cpu-features=",
                                                  "--iree-llvmcpu-target-triple=",
                                                  "--iree-hal-substitute-executable-"))]
    at = next((i for i, f in enumerate(kept) if f.startswith("--iree-hal-target-backends=")),
              len(kept) - 1) + 1
    own = [*([f"--iree-llvmcpu-target-triple={cpu.triple}"] if cpu.triple else []),
           f"--iree-llvmcpu-target-cpu={cpu.cpu}",
           *([f"--iree-llvmcpu-target-cpu-features={cpu.features}"] if cpu.features else [])]
    return (*kept[:at], *own, *kept[at:])


def check_quantized(compiled: CompiledModule, target: Target) -> CompiledModule:
    """Count what the compiled module's contractions compute in, and refuse a module that
    does not deliver its mode: int8 must be all-integer, fp16 must have no f32 contraction."""
    note = compiled.quantization
    if note is None or compiled.source is None:
        return compiled
    types = iree.contraction_element_types(
        iree.global_optimization_ir(compiled.source, compiled.flags))
    census = _census(types)
    used = compiled.lowering.used
    float_ops = census.f32 + census.f16 + census.other
    # No contraction left at all (a 1x1, one-channel QLinearConv becomes elementwise integer
    # math) is not a float one: only float contractions are refused.
    # the activation × activation matmuls the quantizer left float are expected ones
    expected = note.allow_float_contractions or float_ops <= note.float_matmuls
    if note.mode == "int8" and float_ops and not (expected and census.integer):
        raise QuantizationError(
            f"int8: {float_ops} of {census.total} contractions compute in floating point after "
            f"the {used} lowering ({', '.join(census.examples) or 'none found'}); "
            "refusing to call this module int8", where="stage check quantization",
            hint="use `lowering: auto` or `torch` (torch-mlir's tosa/linalg outputs dequantize "
                 "int8 weights to fp32)" if used != "torch" else
                 "a contraction the quantizer left float (not one of its patterns, or a "
                 "keep_float layer) stays f32; set `quantize.allow_float_contractions: true` "
                 "to accept a partly integer module")
    if note.mode == "fp16" and census.f32:
        raise QuantizationError(
            f"fp16: {census.f32} of {census.total} contractions still read f32 "
            f"({', '.join(census.examples)})", where="stage check quantization",
            hint="the target's compiler flags override the f16 demotion; check `flags:` in "
                 f"the profile {target.source}")
    updated = note.model_copy(update={"lowering": used, "contractions": census})
    return dataclasses.replace(compiled, quantization=updated)


def _census(types: list[tuple[str, tuple[str, ...]]]) -> ContractionCensus:
    counts = {"integer": 0, "f16": 0, "f32": 0, "other": 0}
    examples: list[str] = []
    for op, elements in types:
        if all(e.startswith(("i", "si", "ui")) for e in elements):
            counts["integer"] += 1
            continue
        kind = elements[0] if set(elements) == {elements[0]} and elements[0] in (
            "f16", "f32") else "other"
        counts[kind] += 1
        if len(examples) < 3:
            examples.append(f"{op} {'×'.join(elements)}")
    return ContractionCensus(**counts, examples=tuple(examples))


def _failed(lowering: str, stage: str, ops: tuple[str, ...], diagnostics: str,
            module: bytes | None = None) -> LoweringAttempt:
    """The attempt's error is one line: the op, where it came from in the model, the
    compiler's reason (never a `loc(callsite(…` chain); every op an error names is listed."""
    diagnosis = torch_mlir.diagnose(diagnostics, module)
    named = tuple(dict.fromkeys((*([diagnosis.op] if diagnosis.op else []), *ops,
                                 *torch_mlir.ops_in(diagnostics))))
    return LoweringAttempt(lowering=lowering, ok=False, stage=stage, ops=named,
                           error=diagnosis.line())


def save_reproducer(directory: Path, module: bytes | None, diagnostics: str,
                    command: str | None = None) -> None:
    """The MLIR that failed (bytecode, and text with weights elided), the diagnostics and,
    when known, the command that reproduces the failure."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "diagnostics.txt").write_text(diagnostics)
    if module is not None:
        (directory / "input.mlirbc").write_bytes(module)
        (directory / "input.mlir").write_text(torch_mlir.to_text(module))
    if command:
        (directory / "reproduce.sh").write_text(
            f"#!/bin/sh\ncd \"$(dirname \"$0\")\"\n{command}\n")


def _all_failed(attempts: list[LoweringAttempt], reproducer_dir: Path,
                int8: bool = False) -> LoweringError:
    ops = tuple(dict.fromkeys(op for a in attempts for op in a.ops))
    if any(op.startswith("onnx.") for op in ops):  # the ONNX op says more than its carrier
        ops = tuple(op for op in ops if op != "torch.operator")
    stages = "; ".join(f"{a.lowering}: {a.stage}: {_first_error_line(a.error)}"
                       for a in attempts)
    tried = [a.lowering for a in attempts]
    others = [lw for lw in ("tosa", "linalg", "torch") if lw not in tried]
    hint = (f"try `lowering: {others[0]}` or `lowering: auto`" if others and not int8 else
            "int8 models take only the torch lowering (the others compute in float): "
            "replace the op, or build the float model" if int8 else
            "decompose or replace the op in the model before export")
    return LoweringError(_ops_sentence(ops, "no lowering produced a module") + f" [{stages}]",
                         stage="lower+compile", ops=ops, reproducer=str(reproducer_dir),
                         hint=hint)


def _first_error_line(error: str) -> str:
    """The diagnostic that names the problem (e.g. an unknown flag) when no op is named."""
    lines = [ln.strip() for ln in error.splitlines() if ln.strip()]
    named = [ln for ln in lines if "error" in ln.lower()] or lines or ["no diagnostics"]
    return named[0][:200]


def _ops_sentence(ops: tuple[str, ...], base: str) -> str:
    return f"{base}: unsupported op(s) {', '.join(ops)}" if ops else base
