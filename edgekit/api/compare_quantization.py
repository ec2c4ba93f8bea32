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
from pathlib import Path

from edgekit.api.build import BuildOptions, build
from edgekit.config.profiles import load_target
from edgekit.config.recipe import Recipe, load_recipe
from edgekit.device.trial import trial_on_device
from edgekit.errors import EdgekitError
from edgekit.models.bundle import Bundle, QuantizationNote
from edgekit.pipeline.build import default_out
from edgekit.tune.tuner import bench_local, runs_here

MODES = ("none", "int8", "int8-weights", "fp16")


@dataclass
class ModeResult:
    mode: str                        # "fp32" for the unquantized build
    status: str                      # built | skipped | failed
    reason: str = ""
    bundle: Bundle | None = None
    size: int = 0
    p50_ms: float | None = None
    measured_on: str = ""            # "this machine" or the device's address

    @property
    def quantization(self) -> QuantizationNote | None:
        return self.bundle.manifest.quantization if self.bundle else None


def compare_quantization(options: BuildOptions, rounds: int = 5, repetitions: int = 10,
                         say: Callable[[str], None] = lambda _: None, host: str | None = None,
                         identity: Path | None = None) -> list[ModeResult]:
    """Build every mode; time them here when this machine runs the target, or on `host` (each
    variant validated and benchmarked there, never activated, removed afterwards)."""
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
    built = [r for r in results if r.bundle]
    if host:
        _measure_on_device(built, host, identity, rounds, repetitions, say)
    elif built and runs_here(load_target(options.target)):
        _interleaved(built, rounds, say, lambda bundle: bench_local(bundle, threads=1,
                                                                    repetitions=repetitions,
                                                                    warmup=2))
        for r in built:
            r.measured_on = "this machine"
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


def _measure_on_device(built: list[ModeResult], host: str, identity: Path | None, rounds: int,
                       repetitions: int, say: Callable[[str], None]) -> None:
    if not built:
        return
    with trial_on_device(host, identity, [r.bundle for r in built], say) as trial:
        valid = []
        for r, problems in zip(built, trial.problems):
            if problems is None:
                valid.append(r)
                r.measured_on = host if host == trial.address else f"{host} ({trial.address})"
            else:
                r.status, r.reason = "invalid", f"on {trial.address}: {problems}"
        _interleaved(valid, rounds, say,
                     lambda bundle: trial.run_round(bundle, threads=1, repetitions=repetitions))


def _interleaved(results: list[ModeResult], rounds: int, say: Callable[[str], None],
                 run_round: Callable[[Bundle], list[float]]) -> None:
    """Median of per-round medians, the modes interleaved round by round (1 thread)."""
    per_mode: dict[str, list[float]] = {r.mode: [] for r in results}
    for i in range(rounds):
        say(f"timing round {i + 1}/{rounds}")
        for r in results:
            per_mode[r.mode].append(statistics.median(run_round(r.bundle)))
    for r in results:
        r.p50_ms = statistics.median(per_mode[r.mode])
