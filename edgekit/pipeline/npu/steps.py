"""The stages an NPU target adds to `edgekit build` (pipeline/build.py calls these only for a
profile with an `npu:` section, and imports this module only then: the CPU/GPU path never
loads the NPU code)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, LoweringError
from edgekit.models.bundle import Bundle
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu import split
from edgekit.pipeline.npu.ethos import NpuGraph, compile_for_npu, quantize_for_npu
from edgekit.toolchain import tosa


def _timed(name: str, timings: dict[str, float], on_stage, run: Callable):
    if on_stage:
        on_stage(name)
    started = time.perf_counter()
    value = run()
    timings[name] = round(time.perf_counter() - started, 3)
    return value


def _supported(target: Target) -> None:
    if target.npu.kind != "ethos-u":
        raise ConfigError(f"target {target.name}: NPU kind '{target.npu.kind}' is built by its "
                          "own plugin", where=target.source, key="npu.kind",
                          hint="expected ethos-u here")


def key_part(target: Target) -> dict:
    """What an NPU target adds to the build cache key: its toolchains' versions."""
    return {"toolchains": tosa.npu_versions(target.npu.kind)}


def front(recipe: Recipe, exported: ExportedModel, target: Target, workdir: Path,
          timings: dict[str, float], on_stage) -> tuple[ExportedModel, NpuGraph]:
    """Quantize and partition for the NPU (instead of the recipe's own quantizer)."""
    _supported(target)
    quantized, graph = _timed("quantize+partition (npu)", timings, on_stage,
                              lambda: quantize_for_npu(recipe, exported, target, workdir))
    stranded = [o.op for o in graph.ops if o.placement == "cpu" and not split.is_boundary(o)]
    if stranded and target.backend == "none":
        raise LoweringError(
            f"{', '.join(dict.fromkeys(stranded))}: no integer TOSA form for the NPU, and "
            f"{target.name} has no CPU module to fall back to (backend none)",
            stage="partition (npu)", ops=tuple(dict.fromkeys(stranded)),
            hint=f"replace the op, or build for a target with a CPU (`edgekit check MODEL "
                 f"--target {target.name}` lists where each op runs)")
    return quantized, graph


def back(exported: ExportedModel, graph: NpuGraph, target: Target, workdir: Path,
         cpu_bundle: Callable[[], Bundle], npu_only: Callable, timings: dict[str, float],
         on_stage) -> Bundle:
    """Check, prove and compile the NPU partitions first (a refusal costs no CPU compile),
    then the CPU module's bundle (`cpu_bundle`: the ordinary BACK stages) with the NPU
    artifacts added, or, for `backend: none`, a bundle without a module."""
    from edgekit.pipeline.npu.bundle import with_npu
    build = _timed("check+reference model+Vela (npu)", timings, on_stage,
                   lambda: compile_for_npu(graph, target, workdir))
    if target.backend == "none":
        return npu_only(build)
    return with_npu(cpu_bundle(), build)
