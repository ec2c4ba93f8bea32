"""The Rockchip NPU family (`Rknpu`, registered in npu/registry.py): one stage of `edgekit
build`, "npu" after the CPU module's compile, makes the NPU part of a bundle through the
rknn-toolkit2 plugin.

The float model goes to ONNX (its frontend's `interchange`; opset 19: rknn-toolkit2 2.5.0
refuses newer ones, measured); rknn-toolkit2, in its own venv (toolchain/venvs.py: proprietary,
pins numpy 1.26), quantizes it with the recipe's calibration set (its dataset file), compiles it
for the profile's platform (`npu.accelerator`, e.g. rk3588), and runs the golden inputs on its
simulator. The simulator's outputs are compared here with the bundle's golden outputs (the
quantized PyTorch model's for an int8 recipe, the float model's otherwise). rknn quantizes on
its own (its scales are not PyTorch's), so an int8 .rknn is held to the recipe's accuracy floor
(`quantize.min_cosine`, and top-1 agreement when validation asks for it), not to the CPU
module's one-step tolerance; the worst error is recorded in the manifest with what ran it: "rknn
simulator", never the NPU. The simulator gives no timing: the cycle figures are the rknn
compiler's static estimate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, QuantizationError
from edgekit.models.bundle import NpuEstimate, NpuNote, NpuOp
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu.family import NpuFamily, SummaryLine
from edgekit.pipeline.npu.part import NpuPart
from edgekit.pipeline.stages import Edit, Stage
from edgekit.toolchain import venvs
from edgekit.toolchain.runner import run_tool
from edgekit.validate.compare import cosine, top1_agreement, wants_top1

if TYPE_CHECKING:
    from edgekit.pipeline.build_run import BuildRun

TOOLCHAIN = "rknn"
OPSET = 19
SCRIPT = Path(__file__).parent / "venv_scripts" / "rknn_build.py"
ARTIFACT = "npu/model.rknn"
REPORT = "npu/rknn_report.json"
FP16_MIN_COSINE = 0.999     # an unquantized .rknn runs in float16 (measured max error 5.8e-5)


@dataclass(frozen=True)
class RknnJob:
    """What the rknn stage needs besides the compiled CPU module: the float model (rknn
    quantizes it itself), the calibration samples (none: float16 on the NPU) and the floor the
    simulator's outputs are held to."""

    float_model: ExportedModel
    calibration: tuple[tuple[np.ndarray, ...], ...]
    min_cosine: float
    top1: str | None
    where: str


def job_for(recipe: Recipe, float_model: ExportedModel) -> RknnJob:
    """The rknn job of a recipe: int8 → rknn's w8a8 with the recipe's calibration set; none or
    fp16 → float16 on the NPU; int8-weights has no rknn form."""
    from edgekit.pipeline.quantize.samples import calibration_samples
    mode = recipe.quantize.mode if recipe.quantize else None
    if mode == "int8-weights":
        raise ConfigError("rknn-toolkit2 has no weight-only int8 mode for the NPU",
                          where=str(recipe.path), key="quantize.mode",
                          hint="use `mode: int8` (calibrated) or drop `quantize:` (float16 on "
                               "the NPU)")
    calibration = tuple(calibration_samples(recipe, float_model.inputs)) if mode == "int8" \
        else ()
    floor = recipe.quantize.min_cosine if mode == "int8" and recipe.quantize.min_cosine \
        else FP16_MIN_COSINE
    return RknnJob(float_model, calibration, floor, recipe.validation.top1,
                   where=str(recipe.path))


def build_rknn(job: RknnJob, golden_model: ExportedModel, target: Target,
               workdir: Path) -> NpuPart:
    """Convert, quantize, compile for the profile's NPU and simulate the golden inputs."""
    python = venvs.python_of(TOOLCHAIN)
    versions = venvs.versions(TOOLCHAIN)
    work = workdir / "rknn"
    work.mkdir(parents=True, exist_ok=True)
    model = job.float_model
    (work / "model.onnx").write_bytes(model.frontend.interchange(model.program, OPSET))
    dataset = None
    if job.calibration:
        lines = []
        for k, sample in enumerate(job.calibration):
            names = []
            for i, array in enumerate(sample):
                np.save(work / f"calib_{k}_{i}.npy", np.ascontiguousarray(array))
                names.append(str(work / f"calib_{k}_{i}.npy"))
            lines.append(" ".join(names))
        dataset = work / "dataset.txt"
        dataset.write_text("\n".join(lines) + "\n")
    sets = [golden_model.samples, *golden_model.more_samples]
    np.savez(work / "samples.npz", **{f"s{k}_i{i}": a for k, s in enumerate(sets)
                                      for i, a in enumerate(s)})
    request = {"onnx": str(work / "model.onnx"), "platform": target.npu.accelerator,
               "quantize": bool(job.calibration), "dataset": str(dataset) if dataset else None,
               "rknn": str(work / "model.rknn"), "samples": str(work / "samples.npz"),
               "sample_count": len(sets), "input_count": len(golden_model.samples),
               "outputs": str(work / "outputs.npz"), "report": str(work / "done.json")}
    (work / "request.json").write_text(json.dumps(request, indent=1))
    proc = run_tool([python, SCRIPT, work / "request.json"],
                    what=f"rknn-toolkit2 {versions.get('rknn-toolkit2', '')}: ONNX → "
                         f"{target.npu.accelerator} .rknn",
                    hint=f"set EDGEKIT_KEEP_TEMPS=1 to keep {work} (model.onnx, request.json) "
                         "and rerun the command by hand", timeout=1800)
    log = proc.stdout.decode(errors="replace")
    (work / "rknn_build.log").write_text(log)        # kept with EDGEKIT_KEEP_TEMPS=1
    ops = layer_table(log)
    simulated = np.load(work / "outputs.npz")
    goldens = [golden_model.golden, *golden_model.more_golden]
    check = simulator_check(job, golden_model, [
        tuple(simulated[f"s{k}_o{j}"] for j in range(len(g))) for k, g in enumerate(goldens)],
        goldens)
    (work / "rknn_report.json").write_text(json.dumps({
        "layers": [op.model_dump() for op in ops], "memory_kib": memory_kib(log),
        "simulator": check.details}, indent=1) + "\n")
    if not check.ok:
        raise QuantizationError(f"rknn simulator: {check.problem}", where="stage npu (rknn)",
                                hint="rknn quantizes with its own scales: a larger or more "
                                     "representative calibration set (quantize.calibration) "
                                     "or a lower quantize.min_cosine")
    ops = tuple(op for op in ops if op.op not in ("InputOperator", "OutputOperator"))
    total = sum(op.macs for op in ops)
    mem = memory_kib(log)
    toolkit = versions.get("rknn-toolkit2", "?")
    note = NpuNote(
        kind="rknpu", accelerator=target.npu.accelerator, artifact=ARTIFACT, report=REPORT,
        compiler={"rknn-toolkit2": toolkit, "torch (ONNX export)": versions.get("torch", ""),
                  "onnx opset": str(OPSET)},
        ops=ops,
        npu_mac_share=round(sum(op.macs for op in ops if op.placement == "npu") / total, 4)
        if total else None,
        estimate=NpuEstimate(source=f"rknn-toolkit2 {toolkit} compiler's static estimate",
                             cycles=sum(cycles for cycles in _cycles(log)) or None,
                             dram_kib=sum(mem.values()) or None),
        validated_on=f"rknn simulator (rknn-toolkit2 {toolkit})",
        worst_lsb=check.worst_lsb,
        checks=(check.summary,))
    return NpuPart(note=note, files={ARTIFACT: work / "model.rknn",
                                     REPORT: work / "rknn_report.json"})


@dataclass(frozen=True)
class SimulatorCheck:
    ok: bool
    problem: str
    summary: str
    worst_lsb: int | None
    details: dict


def simulator_check(job: RknnJob, model: ExportedModel,
                    simulated: list[tuple[np.ndarray, ...]],
                    goldens: list[tuple[np.ndarray, ...]]) -> SimulatorCheck:
    """The simulator's outputs against the golden outputs, worst over the samples: cosine ≥
    the floor, top-1 agreement where validation wants it; the worst error also in int8 steps
    of the output's golden range (its LSB, were it quantized over that range)."""
    worst_cos, worst_abs, worst_lsb, worst_top1 = 1.0, 0.0, 0, None
    problems, per_output = [], []
    for j, sig in enumerate(model.outputs):
        for k, (got_set, want_set) in enumerate(zip(simulated, goldens)):
            got = np.asarray(got_set[j], np.float64).reshape(np.shape(want_set[j]))
            want = np.asarray(want_set[j], np.float64)
            err = float(np.abs(got - want).max()) if want.size else 0.0
            span = float(want.max() - want.min()) if want.size else 0.0
            lsb = math.ceil(err / (span / 255) - 1e-9) if span > 0 else 0
            cos = cosine(got, want)
            top1 = top1_agreement(got, want) if wants_top1(job.top1, sig.name, want) else None
            per_output.append({"output": sig.name, "sample": k, "max_abs_error": err,
                               "int8_steps": lsb, "cosine": cos, "top1_agreement": top1})
            worst_abs, worst_lsb = max(worst_abs, err), max(worst_lsb, lsb)
            if cos is not None:
                worst_cos = min(worst_cos, cos)
                if cos < job.min_cosine:
                    problems.append(f"{sig.name} (sample {k}): cosine {cos:.5f} below "
                                    f"{job.min_cosine}")
            if top1 is not None:
                worst_top1 = top1 if worst_top1 is None else min(worst_top1, top1)
                if top1 < 1.0:
                    problems.append(f"{sig.name} (sample {k}): top-1 agreement {top1:.0%}")
    what = "the quantized PyTorch model" if model.quantization else "the float model"
    against = f"golden outputs ({what}, {model.reference or 'reference'})"
    summary = (f"vs {against}, {len(goldens)} sample(s): worst cosine "
               f"{worst_cos:.5f} (floor {job.min_cosine}), max abs error {worst_abs:.3g} "
               f"(≈{worst_lsb} int8 steps of the output's range)"
               + (f", top-1 agreement {worst_top1:.0%}" if worst_top1 is not None else ""))
    return SimulatorCheck(ok=not problems, problem="; ".join(problems[:3]), summary=summary,
                          worst_lsb=worst_lsb, details={"against": against,
                                                        "min_cosine": job.min_cosine,
                                                        "outputs": per_output})


# --- the rknn compiler's log (its verbose "Network Layer Information Table") ---------------

_ROW = re.compile(r"^D RKNN: \[[^\]]*\] (\d+)\s+(\S+)\s+(\S+)\s+(NPU|CPU)\s+(\S+)\s+(\S+)\s+"
                  r"(\d+)/(\d+)/(\d+)\s+(\S+)\s+(\S+)\s*$")
_MEMORY = re.compile(r"Total (Internal|Weight) Memory Size: ([\d.]+)\s*(KB|MB)")


def layer_table(log: str) -> list[NpuOp]:
    """Each layer the rknn compiler placed: its op type, NPU or CPU, and its MACs (from the
    weight and output shapes in the table: layers without a weight operand, such as a fused
    attention's activation products, count none)."""
    ops = []
    for line in log.splitlines():
        row = _ROW.match(line.strip())
        if not row:
            continue
        op_type, placement, inputs, output = row.group(2), row.group(4), row.group(5), \
            row.group(6)
        ops.append(NpuOp(op=op_type, placement="npu" if placement == "NPU" else "cpu",
                         reason="" if placement == "NPU" else
                         "the rknn compiler placed it on the CPU (librknnrt runs it there)",
                         macs=_macs(_shapes(inputs), _shapes(output))))
    return ops


def _cycles(log: str) -> list[int]:
    return [int(row.group(9)) for row in map(_ROW.match, (ln.strip() for ln in log.splitlines()))
            if row]


def memory_kib(log: str) -> dict[str, float]:
    found = {}
    for kind, size, unit in _MEMORY.findall(log):
        found[kind.lower()] = float(size) * (1024 if unit == "MB" else 1)
    return found


def _shapes(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in s.split(",") if d.strip().lstrip("-").isdigit())
            for s in re.findall(r"\(([^()]*)\)", text)]


def _macs(inputs: list[tuple[int, ...]], outputs: list[tuple[int, ...]]) -> int:
    """Multiply-accumulates of a layer with a weight operand: a 4-D weight (convolution) does
    its size once per output pixel; a 2-D weight (matmul) once per output row."""
    if len(inputs) < 2 or not outputs or not outputs[0]:
        return 0
    weight, out = inputs[1], outputs[0]
    if len(weight) == 4 and len(out) == 4:
        return math.prod(weight) * out[0] * out[2] * out[3]
    if len(weight) == 2 and len(out) >= 2:
        return math.prod(weight) * math.prod(out[:-1])
    return 0


def with_npu(compiled, part: NpuPart):
    """The compiled module carrying the NPU part to `package`."""
    return replace(compiled, npu=part)


# --- the family ------------------------------------------------------------------------------

class Rknpu(NpuFamily):
    """Rockchip NPUs: the CPU module is built as for the board's CPU profile, then the "npu"
    stage converts the float model (rknn quantizes it with its own scales) and attaches the
    .rknn, validated on the simulator."""

    kind = "rknpu"
    toolchains = (TOOLCHAIN,)

    def plan_edits(self, target: Target) -> tuple[Edit, ...]:
        from edgekit.pipeline.lower import CompiledModule
        return (Edit("after", "compile variants", (
            Stage("npu", CompiledModule, CompiledModule, _npu_stage),)),)

    def summary(self, note: NpuNote) -> tuple[SummaryLine, ...]:
        on_npu = sum(op.placement == "npu" for op in note.ops)
        share = f", {note.npu_mac_share:.0%} of MACs" if note.npu_mac_share is not None else ""
        compiler = ", ".join(f"{k} {v}" for k, v in note.compiler.items())
        lines = [SummaryLine(f"  npu: {note.accelerator} {note.artifact} ({compiler}); {on_npu} "
                             f"of {len(note.ops)} ops on the NPU{share}")]
        lines += [SummaryLine(f"    {op.placement}: {op.op} — {op.reason}")
                  for op in note.ops if op.placement != "npu"]
        e = note.estimate
        if e is not None:
            figures = [f"{e.cycles:,} cycles" if e.cycles else "",
                       f"{e.inferences_per_s:,.0f} inferences/s" if e.inferences_per_s else "",
                       f"SRAM {e.sram_kib:,.1f} KiB" if e.sram_kib else "",
                       f"DRAM {e.dram_kib:,.1f} KiB" if e.dram_kib else ""]
            lines.append(SummaryLine(f"  npu estimate ({e.source}, not measured): "
                                     f"{', '.join(f for f in figures if f) or 'none'}"))
        lines += [SummaryLine(f"  npu validated on {note.validated_on}: {check}")
                  for check in note.checks]
        lines.append(SummaryLine("  cpu fallback: module.vmfb (IREE, the profile's CPU): "
                                 "`edgekit deploy --cpu-fallback` on a board without a working "
                                 "NPU"))
        return tuple(lines)


def _npu_stage(run: BuildRun, compiled):
    """The .rknn from the float model (before the recipe's quantizer), simulated on the
    compiled module's golden data."""
    return with_npu(compiled, build_rknn(job_for(run.recipe, run.float_model),
                                         compiled.exported, run.target, run.workdir))
