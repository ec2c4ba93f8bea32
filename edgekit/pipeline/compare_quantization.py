"""`edgekit build --compare-quantization`: does quantizing pay off for this model and target?

Builds the fp32 model and each quantization mode for the target (int8 only when the recipe
names calibration data; for an ONNX QDQ model: the model and the fp32 model it names), then
reports module size, accuracy vs fp32 on held-out samples, the kind of compute and — when
this machine runs the target — latency, measured interleaved.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from edgekit.config.profiles import load_target
from edgekit.config.recipe import Recipe, load_recipe
from edgekit.errors import EdgekitError
from edgekit.models.bundle import Bundle, QuantizationNote
from edgekit.pipeline.build import BuildOptions, build, default_out

MODES = ("none", "int8", "int8-weights", "fp16")


@dataclass
class ModeResult:
    mode: str                        # "fp32" for the unquantized build
    status: str                      # built | skipped | failed
    reason: str = ""
    bundle: Bundle | None = None
    size: int = 0
    p50_ms: float | None = None

    @property
    def quantization(self) -> QuantizationNote | None:
        return self.bundle.manifest.quantization if self.bundle else None


def compare_quantization(options: BuildOptions, rounds: int = 5, repetitions: int = 10,
                         say: Callable[[str], None] = lambda _: None) -> list[ModeResult]:
    recipe = load_recipe(options.recipe)
    base_out = options.out or default_out(recipe, load_target(options.target))
    results: list[ModeResult] = []
    for mode in MODES:
        label = "fp32" if mode == "none" else mode
        skip = _skip_reason(recipe, mode)
        if skip:
            results.append(ModeResult(label, "skipped", skip))
            continue
        say(f"building {label}")
        try:
            built = build(dataclasses.replace(options, quantize=mode, tar=False,
                                              out=base_out.with_name(f"{base_out.name}-{label}")))
        except EdgekitError as exc:
            results.append(ModeResult(label, "failed", exc.what.strip().splitlines()[0][:200]))
            continue
        if mode != "none" and built.bundle.manifest.quantization is None:
            results.append(ModeResult(label, "skipped", "the ONNX model is not a QDQ model"))
            continue
        results.append(ModeResult(label, "built", bundle=built.bundle,
                                  size=built.bundle.module.stat().st_size))
    _measure_latency([r for r in results if r.bundle], options.target, rounds, repetitions, say)
    return results


def _skip_reason(recipe: Recipe, mode: str) -> str:
    quantize = recipe.quantize
    if recipe.model.onnx:  # ONNX models arrive quantized (QDQ) or not at all
        if mode == "none" and not (quantize and quantize.float_model):
            return "no `quantize.float_model` (the fp32 .onnx) in the recipe"
        if mode in ("int8-weights", "fp16"):
            return "ONNX models are quantized before the build (QDQ int8 only)"
        return ""
    if mode == "int8" and not (quantize and quantize.calibration):
        return "no `quantize.calibration` in the recipe"
    return ""


def _measure_latency(results: list[ModeResult], target_name: str, rounds: int,
                     repetitions: int, say: Callable[[str], None]) -> None:
    """Median of per-round medians, the modes interleaved round by round (1 thread)."""
    from edgekit.pipeline.tune import bench_local, runs_here
    if not runs_here(load_target(target_name)):
        return
    per_mode: dict[str, list[float]] = {r.mode: [] for r in results}
    for i in range(rounds):
        say(f"timing round {i + 1}/{rounds}")
        for r in results:
            per_mode[r.mode].append(statistics.median(
                bench_local(r.bundle, threads=1, repetitions=repetitions, warmup=2)))
    for r in results:
        r.p50_ms = statistics.median(per_mode[r.mode])
