"""Arm Ethos-U builds: integer TOSA 1.0 (PRO-INT), proven on the TOSA reference model, compiled
by Vela.

The family (`EthosU`, registered in npu/registry.py) edits `edgekit build`'s plan for a target
with `npu.kind: ethos-u`:
- `quantize_for_npu` (replaces the recipe's quantizer): the exported fp32 program goes to the
  executorch venv (toolchain/venv_scripts/et_tosa.py: TOSAQuantizer with the recipe's
  calibration set, TOSAPartitioner with "TOSA-1.0+INT"); back come the quantized program (the
  CPU module's source: the same integer model), its outputs (the golden outputs), a TOSA
  flatbuffer per NPU partition with that partition's integer inputs/outputs, and every op's
  placement.
- `compile_for_npu`: per partition, the strict PRO-INT check before serializing (tosa-opt),
  the TOSA reference model against the quantized PyTorch model (worst difference in LSBs; more
  than 1 is refused), IREE on the same TOSA on this host (a second, independent executor), and
  Vela for the profile's accelerator, system configuration and memory mode. It runs before
  the CPU module's compile (a refusal costs none); a target with a CPU (`backend` not none)
  gets the same integer model as its IREE CPU module, with the NPU part beside it, and a
  microcontroller (`backend: none`) the NPU part alone.
The venvs are called by subprocess with files as the protocol (toolchain/venvs.py).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, LoweringError, ToolError, ValidationFailed
from edgekit.models.bundle import Bundle, NpuEstimate, NpuNote, NpuOp, QuantizationNote
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu import split
from edgekit.pipeline.npu.family import NpuFamily, Partitioned, SummaryLine
from edgekit.pipeline.npu.part import NpuPart
from edgekit.pipeline.stages import Edit, Stage
from edgekit.toolchain import iree, tosa
from edgekit.toolchain.runner import run_tool

if TYPE_CHECKING:
    from edgekit.pipeline.build_run import BuildRun

SPEC = "TOSA-1.0+INT"
# the Ethos-U55 lacks some TOSA ops (ExecuTorch's "u55" subset keeps those on the CPU)
SPEC_BY_ACCELERATOR = {"ethos-u55": SPEC + "+u55"}
MAX_LSB = 1                         # the reference model may differ from PyTorch by one step
NPU_DIR = "npu"                     # where the bundle keeps the NPU artifacts


@dataclass(frozen=True)
class NpuGraph:
    """What the executorch venv made of the model: files in `folder` and op placements."""

    folder: Path
    ops: tuple[NpuOp, ...]
    partitions: tuple[str, ...]     # partition stems: part0, part1, … (part<p>.tosa/.npz)
    versions: dict[str, dict[str, str]]


def spec_for(target: Target) -> str:
    accelerator = target.npu.accelerator
    return next((s for prefix, s in SPEC_BY_ACCELERATOR.items()
                 if accelerator.startswith(prefix)), SPEC)


# --- quantize and partition (executorch venv) --------------------------------------------------

def quantize_for_npu(recipe: Recipe, exported: ExportedModel, target: Target,
                     workdir: Path, calibration: list | None = None
                     ) -> tuple[ExportedModel, NpuGraph]:
    """The recipe's model quantized by ExecuTorch's TOSAQuantizer and split by its partitioner;
    golden outputs are the quantized PyTorch model's. `calibration` given (`edgekit check`:
    where ops run does not depend on it): the recipe's quantize settings are not asked for
    and its accuracy floor is not applied."""
    from edgekit.pipeline.quantize import tosa_int
    from edgekit.pipeline.quantize.accuracy import accuracy_report, check_floor
    from edgekit.pipeline.quantize.samples import calibration_samples, held_out_samples
    where = f"{recipe.path} (quantize)"
    tosa_int.require_pytorch(exported, recipe, target.name)
    checking = calibration is not None
    if not checking and (recipe.quantize is None or recipe.quantize.mode != "int8"):
        raise ConfigError(f"target {target.name} runs integer TOSA: the recipe must quantize "
                          "to int8 with a calibration set", where=str(recipe.path),
                          key="quantize", hint="add `quantize: {mode: int8, calibration: …}`")
    versions = EthosU().versions()
    folder = workdir / "npu-graph"
    folder.mkdir(parents=True, exist_ok=True)
    calibration = calibration if checking else calibration_samples(recipe, exported.inputs)
    held_out, source = held_out_samples(recipe, exported.inputs)
    sets = [exported.samples, *exported.more_samples, *held_out]
    tosa_int.save_float(exported, folder / "float.pt2")
    _save_sets(folder / "calibration.npz", "c", calibration)
    _save_sets(folder / "samples.npz", "s", sets)
    request = {"program": str(folder / "float.pt2"), "calibration": str(folder / "calibration.npz"),
               "samples": str(folder / "samples.npz"), "spec": spec_for(target),
               "out": str(folder), "capture": 1 + len(exported.more_samples)}
    (folder / "request.json").write_text(json.dumps(request))
    try:
        run_tool(tosa.venv_script_argv("executorch", "et_tosa.py", folder / "request.json"),
                 what="quantizing and partitioning for the NPU (ExecuTorch's Arm backend)",
                 hint="EDGEKIT_KEEP_TEMPS=1 keeps its files", timeout=3600)
    except ToolError as exc:
        said = re.findall(r"edgekit-npu-error: (.*)", exc.stderr_tail)
        if exc.returncode != 3 or not said:
            raise
        raise LoweringError(f"ExecuTorch's Arm backend cannot take the model: {said[-1]}",
                            stage="quantize+partition (npu)",
                            hint="replace the op it names (ExecuTorch takes PyTorch's core "
                                 "ATen ops); EDGEKIT_KEEP_TEMPS=1 keeps the exported program "
                                 "and request for a reproducer") from None
    result = json.loads((folder / "result.json").read_text())
    outputs = _load_sets(folder / "golden.npz", "o", len(sets))
    quantized, digest = tosa_int.load_quantized(folder / "quantized.pt2")
    names = [o.name for o in exported.outputs]
    by_id = {id(s): o for s, o in zip(held_out, outputs[len(sets) - len(held_out):])}
    report = accuracy_report(tosa_int.fp32_runner(exported), lambda s: by_id[id(s)], held_out,
                             source, names, recipe.validation)
    if not checking:
        floor = recipe.quantize.npu_min_cosine if recipe.quantize.npu_min_cosine is not None \
            else recipe.quantize.min_cosine
        check_floor(report, floor, "int8 (npu)", where=where)
    ops = split.placed_ops(result["ops"])
    contractions = sum(1 for o in ops if o.macs)
    note = QuantizationNote(
        mode="int8", weights="per-channel", quantized_ops=contractions,
        # what lands on the CPU stays as the quantizer left it: an op with no integer form
        # computes in float there, and the split says so
        allow_float_contractions=True,
        calibration=(f"{recipe.quantize.calibration} ({len(calibration)} samples)"
                     if not checking else f"the check's samples ({len(calibration)})"),
        accuracy=report,
        golden="outputs of the quantized PyTorch model (ExecuTorch TOSAQuantizer)")
    more = len(exported.more_samples)
    quantized_model = dataclasses.replace(
        exported, program=quantized, digest=digest, golden=outputs[0],
        more_golden=tuple(outputs[1:1 + more]), quantization=note,
        reference=tosa_int.reference_name(versions["executorch"]["executorch"]))
    graph = NpuGraph(folder=folder, ops=ops,
                     partitions=tuple(Path(p["file"]).stem for p in result["partitions"]),
                     versions=versions)
    return quantized_model, graph


def _save_sets(path: Path, prefix: str, sets) -> None:
    np.savez(path, **{f"{prefix}{i}_{j}": np.asarray(a) for i, s in enumerate(sets)
                      for j, a in enumerate(s)})


def _load_sets(path: Path, prefix: str, count: int) -> list[tuple[np.ndarray, ...]]:
    data = np.load(path)
    rows: dict[int, dict[int, np.ndarray]] = {}
    for key in data.files:
        i, j = key[len(prefix):].split("_")
        rows.setdefault(int(i), {})[int(j)] = data[key]
    return [tuple(rows[i][j] for j in sorted(rows[i])) for i in range(count)]


# --- check, prove and compile each partition (tosa venv) ---------------------------------------

def compile_for_npu(graph: NpuGraph, target: Target, workdir: Path) -> NpuPart:
    npu = target.npu
    out = workdir / "npu-out"
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    worst_ref, worst_iree, iree_vs_ref, summaries = 0, 0, 0, []
    vela_ops = {"NPU": 0, "CPU": 0}     # Vela's own count of the TOSA ops it placed
    for stem in graph.partitions:
        tosa_in = graph.folder / f"{stem}.tosa"
        mlir = out / f"{stem}.mlir"
        run_tool(tosa.deserialize_argv(tosa_in, mlir), what=f"reading {stem}.tosa (tosa-opt)")
        checked = out / f"{stem}.tosa"
        _strict_check(mlir, checked, stem)
        files.append(checked.name)
        ref_outputs = out / f"{stem}.ref.npz"
        worst_ref = max(worst_ref, _reference_model(checked, graph.folder / f"{stem}.npz",
                                                    out / f"{stem}.ref.json", ref_outputs))
        vs_golden, vs_ref = _iree_on_host(checked, graph.folder / f"{stem}.npz", ref_outputs,
                                          out, stem)
        worst_iree, iree_vs_ref = max(worst_iree, vs_golden), max(iree_vs_ref, vs_ref)
        vela_dir = out / f"{stem}-vela"
        said = run_tool(tosa.vela_argv(checked, vela_dir, npu.accelerator, npu.system_config,
                                       npu.memory_mode),
                 what=f"Vela ({npu.accelerator}) on {stem}.tosa",
                 hint="the profile's npu.accelerator, system_config and memory_mode must be "
                      "names Vela knows (its vela.ini)")
        for kind, count in _VELA_OPS.findall(said.stdout.decode(errors="replace")):
            vela_ops[kind] += int(count)
        for made in sorted(vela_dir.iterdir()):
            if made.suffix in (".tflite", ".csv"):
                shutil.copyfile(made, out / made.name)
                files.append(made.name)
                if made.suffix == ".csv":
                    summaries.append(made)
    if worst_ref > MAX_LSB:
        raise ValidationFailed(
            f"the TOSA reference model differs from the quantized PyTorch model by {worst_ref} "
            f"LSB (at most {MAX_LSB} passes; IREE on the same TOSA is {iree_vs_ref} LSB from "
            f"the reference model): refusing to build NPU code for {target.name}",
            report=None, hint="EDGEKIT_KEEP_TEMPS=1 keeps the partitions and their golden "
                              "integer inputs/outputs for a reproducer")
    vela = graph.versions.get("tosa", {}).get("ethos-u-vela", "?")
    estimate = vela_estimate(summaries, vela)
    artifact = next((f for f in files if f.endswith(".tflite")), files[0] if files else "")
    report = next((f for f in files if f.endswith(".csv")), "")
    note = NpuNote(
        kind=npu.kind, accelerator=npu.accelerator,
        artifact=f"{NPU_DIR}/{artifact}" if artifact else "",
        report=f"{NPU_DIR}/{report}" if report else "",
        compiler=_compiler_versions(graph.versions),
        ops=graph.ops, npu_mac_share=split.mac_share(graph.ops), estimate=estimate,
        validated_on="TOSA reference model", worst_lsb=worst_ref,
        checks=(f"strict TOSA 1.0 PRO-INT check (tosa-opt) on {len(graph.partitions)} "
                "partition(s)",
                f"IREE llvm-cpu on the same TOSA on the build host: worst {worst_iree} LSB "
                f"(vs the reference model: {iree_vs_ref} LSB)",
                f"Vela placed {vela_ops['NPU']} TOSA operator(s) on the NPU, "
                f"{vela_ops['CPU']} on the CPU"))
    return NpuPart(note=note, files={f"{NPU_DIR}/{name}": out / name for name in files})


def _compiler_versions(versions: dict[str, dict[str, str]]) -> dict[str, str]:
    """One flat table of the venvs' packages; a package in two venvs (tosa-tools: the
    serializer in executorch's, the checker in tosa's) is named with its venv."""
    seen = Counter(name for chain in versions.values() for name in chain)
    return {name if seen[name] == 1 else f"{name} ({venv} venv)": version
            for venv, chain in versions.items() for name, version in chain.items()}


_VELA_OPS = re.compile(r"^(CPU|NPU) operators = (\d+)", re.MULTILINE)
_TOSA_OP = re.compile(r"'(tosa\.\w+)' op")


def _strict_check(mlir: Path, checked: Path, stem: str) -> None:
    try:
        run_tool(tosa.strict_check_argv(mlir, checked), what="strict PRO-INT check")
    except ToolError as exc:
        ops = tuple(dict.fromkeys(_TOSA_OP.findall(exc.stderr_tail)))
        first = next((line.strip() for line in exc.stderr_tail.splitlines()
                      if "error" in line), exc.stderr_tail.strip()[:200])
        raise LoweringError(
            f"{stem}: not integer-only TOSA 1.0 (PRO-INT): {first[:200]}",
            stage="strict PRO-INT check", ops=ops,
            hint="an op without an integer form must stay on the CPU; `edgekit check MODEL "
                 "--target T` lists where each op runs") from None


def _reference_model(checked: Path, arrays: Path, result: Path, outputs: Path) -> int:
    run_tool(tosa.venv_script_argv("tosa", "tosa_ref.py", checked, arrays, result, outputs),
             what=f"the TOSA reference model on {checked.name}")
    return int(json.loads(result.read_text())["worst_lsb"])


def _iree_on_host(checked: Path, arrays: Path, reference: Path, out: Path,
                  stem: str) -> tuple[int, int]:
    """IREE llvm-cpu on the same TOSA (generic MLIR: facts.md), run on this host: its worst
    difference in LSBs from the golden outputs, and from the reference model's."""
    generic = out / f"{stem}.generic.mlir"
    run_tool(tosa.deserialize_argv(checked, generic, generic=True),
             what=f"reading {checked.name} (tosa-opt)")
    vmfb = out / f"{stem}.host.vmfb"
    try:
        iree.compile_module(generic, vmfb, ("--iree-input-type=tosa",
                                            "--iree-hal-target-device=local",
                                            "--iree-hal-local-target-device-backends=llvm-cpu",
                                            "--iree-llvmcpu-target-cpu=host"))
    except iree.CompileFailure as exc:
        raise LoweringError(f"{stem}: IREE cannot compile the NPU partition's TOSA on the host",
                            stage="IREE on TOSA", ops=exc.ops,
                            hint="the TOSA passed the strict check; this is an IREE gap") \
            from None
    data, ref = np.load(arrays), np.load(reference)
    samples = sorted({int(k[1:].split("_")[0]) for k in data.files if k.startswith("i")})
    worst = vs_ref = 0
    for s in samples:
        ins = sorted((k for k in data.files if k.startswith(f"i{s}_")),
                     key=lambda k: int(k.split("_")[1]))
        outs = sorted((k for k in data.files if k.startswith(f"o{s}_")),
                      key=lambda k: int(k.split("_")[1]))
        in_paths, out_paths = [], []
        for k in ins:
            np.save(out / f"{stem}.{k}.npy", data[k])
            in_paths.append(out / f"{stem}.{k}.npy")
        out_paths = [out / f"{stem}.iree.{k}.npy" for k in outs]
        iree.run_module(vmfb, "local-task", "main", in_paths, out_paths)
        for k, path in zip(outs, out_paths):
            got = np.load(path).astype(np.int64)
            worst = max(worst, int(np.abs(got - data[k].astype(np.int64)).max()))
            vs_ref = max(vs_ref, int(np.abs(got - ref[k].astype(np.int64)).max()))
    return worst, vs_ref


def vela_estimate(summaries: list[Path], version: str) -> NpuEstimate:
    """Vela's per-network summary CSVs (one per NPU partition) as one estimate: cycles add up
    (the partitions run one after another), inferences/s follow from the clock."""
    rows = []
    for path in summaries:
        with path.open(newline="") as f:
            rows.extend(csv.DictReader(f))
    if not rows:
        return NpuEstimate(source=f"Vela {version} static estimate")
    clock = float(rows[0]["core_clock"])
    cycles = sum(int(float(r["cycles_total"])) for r in rows)
    return NpuEstimate(
        source=f"Vela {version} static estimate ({rows[0]['system_config']}, "
               f"{rows[0]['memory_mode']})",
        clock_hz=int(clock), cycles=cycles,
        inferences_per_s=round(clock / cycles, 1) if cycles else None,
        sram_kib=round(max(float(r["sram_memory_used"]) for r in rows), 2),
        dram_kib=round(sum(float(r["dram_memory_used"]) for r in rows), 2))


# --- the family: its stages in `edgekit build`'s plan, its summary, its partitioner ------------

class EthosU(NpuFamily):
    """Arm Ethos-U: ExecuTorch's Arm backend quantizes and partitions (instead of the recipe's
    quantizer), the partitions are proven and compiled by Vela before the CPU module."""

    kind = "ethos-u"
    toolchains = tosa.ETHOS_TOOLCHAINS
    places_ops = True

    def plan_edits(self, target: Target) -> tuple[Edit, ...]:
        from edgekit.pipeline.lower import CompiledModule
        build = _EthosBuild()
        vela = Stage("check+reference model+Vela (npu)", ExportedModel, ExportedModel,
                     build.compile)
        edits = [Edit("replace", "quantize", (Stage("quantize+partition (npu)", ExportedModel,
                                                    ExportedModel, build.quantize),))]
        if target.backend == "none":      # a microcontroller: no CPU module to build
            return (*edits, Edit("replace", "rewrite", through="package", stages=(
                vela, Stage("package (npu only)", ExportedModel, Bundle, build.npu_only))))
        return (*edits, Edit("before", "rewrite", (vela,)),
                Edit("after", "compile variants", (
                    Stage("npu", CompiledModule, CompiledModule, build.attach),)))

    def summary(self, note: NpuNote) -> tuple[SummaryLine, ...]:
        lines = [SummaryLine(f"  npu ({note.accelerator}): "
                             f"{split.split_line(note.ops, note.npu_mac_share)}")]
        if split.cpu_summary(note.ops):
            lines.append(SummaryLine(f"    CPU fallback: {split.cpu_summary(note.ops)}"))
        if note.worst_lsb is not None:
            lines.append(SummaryLine(
                f"  validated on the {note.validated_on} (not on an NPU): worst "
                f"{note.worst_lsb} LSB vs the quantized PyTorch model (≤ {MAX_LSB} passes)"))
        lines += [SummaryLine(f"    {check}") for check in note.checks]
        if note.estimate:
            lines.append(SummaryLine(f"  {split.estimate_line(note.estimate)}", "cyan"))
        if note.artifact:
            lines.append(SummaryLine(f"  npu artifact: {note.artifact}" +
                                     (f", report {note.report}" if note.report else "")))
        return tuple(lines)

    def partition(self, recipe: Recipe, exported: ExportedModel, target: Target,
                  workdir: Path, calibration: list) -> Partitioned:
        quantized, graph = quantize_for_npu(recipe, exported, target, workdir, calibration)
        return Partitioned(quantized, graph.ops, len(graph.partitions))


class _EthosBuild:
    """One build's Ethos-U stages and what passes between them (the partitioned graph, then
    the compiled NPU part)."""

    graph: NpuGraph
    part: NpuPart

    def quantize(self, run: BuildRun, exported: ExportedModel) -> ExportedModel:
        target = run.target
        quantized, self.graph = quantize_for_npu(run.recipe, exported, target, run.workdir)
        stranded = [o.op for o in self.graph.ops
                    if o.placement == "cpu" and not split.is_boundary(o)]
        if stranded and target.backend == "none":
            raise LoweringError(
                f"{', '.join(dict.fromkeys(stranded))}: no integer TOSA form for the NPU, and "
                f"{target.name} has no CPU module to fall back to (backend none)",
                stage="partition (npu)", ops=tuple(dict.fromkeys(stranded)),
                hint=f"replace the op, or build for a target with a CPU (`edgekit check MODEL "
                     f"--target {target.name}` lists where each op runs)")
        return quantized

    def compile(self, run: BuildRun, exported: ExportedModel) -> ExportedModel:
        self.part = compile_for_npu(self.graph, run.target, run.workdir)
        return exported

    def attach(self, run: BuildRun, compiled):
        return dataclasses.replace(compiled, npu=self.part)

    def npu_only(self, run: BuildRun, exported: ExportedModel) -> Bundle:
        from edgekit.pipeline.npu.bundle import npu_only
        back = run.back_context()
        return npu_only(exported, back.identity(exported.quantization), run.target,
                        back.bundle_dir, self.part)
