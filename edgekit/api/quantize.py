"""`edgekit quantize search|report`, and `quantize: {mode: int8, max_drop}` in a build.

Search: the float model's layers are ranked by the error each adds in the all-int8 model
(bisect's taps at every module boundary, its profile against the float model, on the dataset's
first samples, eagerly on the host: the golden check holds the module to that quantized
reference). Candidate k keeps the k worst layers float (`quantize.keep_float`); each is built
through `edgekit build` (cached), scored on the recipe's `validation.dataset` with the built
module in this process (the dataset gate's own set and metric, read from the bundle), and timed
in process, candidates interleaved round by round (tune's InProcessBench). The fastest
candidate within `max_drop` of the float model's score is chosen (pipeline/quantize/search.py);
a build of a `max_drop` recipe builds it, recording the float layers and their errors.

Modules are measured on this machine by default: for a target it cannot run (rpi4), the search
builds the candidates for `host` (the same quantized graph) and the chosen layers are built for
the target. With `host` (a device), the candidates are built for the target and measured where
they will run: each is uploaded to the device as a trial release (never activated, removed
after), validated there, scored on its labelled set with the device's runtime (as the dataset
gate scores it) and timed with the device's iree-benchmark-module, candidates interleaved round
by round (device/trial.py, the path `tune --host` and `bench` take).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.config.profiles import load_target
from edgekit.config.recipe import LayerError, QuantizeSearch, Recipe, SearchCandidate, load_recipe
from edgekit.errors import ConfigError, QuantizationError
from edgekit.models.bundle import Bundle
from edgekit.pipeline.build_types import BuildOptions, BuildResult
from edgekit.pipeline.quantize.search import (Measured, choose, enough, float_counts, frontier,
                                              rank_layers)

PROFILE_SAMPLES = 16      # dataset samples the per-layer errors are measured on


@dataclass(frozen=True)
class SearchOptions:
    recipe: Path
    target: str
    max_drop: float | None = None   # over the recipe's quantize.max_drop
    max_float: int = 4              # at most this many layers kept float
    rounds: int = 5                 # timing rounds, candidates interleaved in each
    fp32: bool = True               # also build, score and time the float model
    beyond: int = 1                 # candidates built after the first within max_drop
    out: Path | None = None         # candidate bundles [default: a temporary directory]
    trust_pickle: bool = False
    host: str | None = None         # a device: score and time the candidates there
    identity: Path | None = None    # private key for `host`


@dataclass(frozen=True)
class SearchResult:
    app: str
    target: str                     # what the candidates were built for
    metric: str
    max_drop: float
    reference_score: float          # the float model's (eager), as the dataset gate's reference
    layers: tuple[LayerError, ...]  # worst first
    candidates: tuple[Measured, ...]
    chosen: Measured | None
    seconds: dict[str, float] = field(default_factory=dict)
    # where the candidates were scored and timed: "host" (this machine, in process) or the
    # device's address (its runtime tools)
    measured_on: str = "host"
    # candidates the device refused (golden outputs): (name, its problems); never chosen
    refused: tuple[tuple[str, str], ...] = ()

    @property
    def frontier(self) -> list[Measured]:
        return frontier(self.candidates)

    def summary(self) -> QuantizeSearch:
        """What a build of the choice records (scores, no latencies: they vary per run and
        the record is part of the build's key)."""
        return QuantizeSearch(
            metric=self.metric, max_drop=self.max_drop, reference_score=self.reference_score,
            layers=self.layers,
            measured_on=self.target if self.measured_on == "host" else self.measured_on,
            candidates=tuple(SearchCandidate(float_layers=len(c.float_layers), score=c.score,
                                             drop=c.drop)
                             for c in self.candidates if c.quantized))


def search(options: SearchOptions, say: Callable[[str], None] = lambda _: None) -> SearchResult:
    """Rank the layers, build and measure the candidates, choose (see the module docstring)."""
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    recipe = _search_recipe(options)
    gate = recipe.validation.dataset
    max_drop = recipe.quantize.max_drop
    # a device runs the target's own modules; this machine, those of a target it runs
    target = options.target if options.host else _measuring_target(options.target)

    say("measuring each layer's int8 error against the float model")
    errors, reference = _layer_errors(recipe)
    layers = rank_layers(errors)
    seconds["layer errors"] = round(time.perf_counter() - started, 2)

    with tempfile.TemporaryDirectory(prefix="edgekit-quantize-") as scratch, \
            _Measuring(options, say) as where:
        out = options.out or Path(scratch)
        builds: list[tuple[Measured, Bundle]] = []

        def scored(name: str, kept: tuple[str, ...], bundle: Bundle,
                   quantized: bool) -> Measured | None:
            measured = where.scored(name, kept, bundle, gate.metric, reference, quantized)
            if measured is not None:
                builds.append((measured, bundle))
                say(f"{name}: {gate.metric} {measured.score:.4f} (drop {measured.drop:+.4f})")
            return measured

        if options.fp32:
            fp32 = recipe.model_copy(update={"quantize": None})
            scored("fp32", (), _build(options, fp32, target, out / "fp32", say, "fp32"), False)
        tried: list[Measured] = []
        for k in float_counts(len(layers), options.max_float):
            kept = tuple(e.layer for e in layers[:k])
            name = "int8" if k == 0 else f"int8 + {k} float"
            bundle = _build(options, _keeping(recipe, kept), target,
                            out / f"int8-{k}", say, name)
            measured = scored(name, kept, bundle, True)
            if measured is not None:
                tried.append(measured)
            if enough(tried, max_drop, options.beyond):
                break
        seconds["builds and scores"] = round(time.perf_counter() - started, 2)
        say(f"timing {len(builds)} builds {where.timing}")
        timed = where.timed(builds, options.rounds)
    candidates = tuple(timed)
    seconds["total"] = round(time.perf_counter() - started, 2)
    return SearchResult(app=recipe.name, target=target, metric=gate.metric, max_drop=max_drop,
                        reference_score=reference, layers=layers, candidates=candidates,
                        chosen=choose(candidates, max_drop), seconds=seconds,
                        measured_on=where.name, refused=tuple(where.refused))


def refuse_unmet(result: SearchResult, recipe: Path) -> None:
    """No candidate met the drop: one line (QuantizationError, exit 18)."""
    if result.chosen is not None:
        return
    quantized = [c for c in result.candidates if c.quantized]
    if not quantized:
        name, problems = result.refused[0] if result.refused else ("int8", "not built")
        raise QuantizationError(
            f"int8: every candidate was refused on {result.measured_on} (first: {name}: "
            f"{problems})", where=f"{recipe} (quantize.max_drop)",
            hint="deploy the all-int8 build to the device to see why it is refused there")
    best = min(quantized, key=lambda c: c.drop)
    raise QuantizationError(
        f"int8: no candidate is within max_drop {result.max_drop:g} of the float model's "
        f"{result.metric} {result.reference_score:.4f} (best: {best.name}, drop "
        f"{best.drop:.4f})", where=f"{recipe} (quantize.max_drop)",
        hint="allow more float layers (edgekit quantize search --max-float N), calibrate "
             "on more representative samples, or raise max_drop")


def chosen_recipe(recipe: Recipe, result: SearchResult) -> Recipe:
    """The recipe that builds the choice: its float layers and why (refused in one line when
    no candidate met the drop)."""
    refuse_unmet(result, recipe.path)
    quantize = recipe.quantize.model_copy(update={
        "keep_float": result.chosen.float_layers, "search": result.summary()})
    return recipe.model_copy(update={"quantize": quantize})


def searched_options(options: BuildOptions,
                     say: Callable[[str], None] = lambda _: None) -> BuildOptions:
    """`edgekit build` of a recipe whose `quantize.max_drop` asks for a search: the options
    that build the choice (`recipe_override`); other recipes: `options` as they are."""
    if options.recipe_override is not None or options.quantize is not None:
        return options
    recipe = load_recipe(options.recipe)
    if recipe.quantize is None or not recipe.quantize.searches:
        return options
    result = search(SearchOptions(recipe=options.recipe, target=options.target,
                                  fp32=False, beyond=0, trust_pickle=options.trust_pickle),
                    say)
    if options.trust_pickle:
        recipe = recipe.trusting_pickle()
    return dataclasses.replace(options, recipe_override=chosen_recipe(recipe, result))


def build_searched(options: SearchOptions, say: Callable[[str], None] = lambda _: None
                   ) -> tuple[SearchResult, BuildResult]:
    """`edgekit quantize search --build`: search, then build the choice for the target."""
    from edgekit.api.build import build
    result = search(options, say)
    recipe = chosen_recipe(_search_recipe(options), result)
    return result, build(BuildOptions(recipe=options.recipe, target=options.target,
                                      trust_pickle=options.trust_pickle,
                                      recipe_override=recipe))


# --- the steps -------------------------------------------------------------------------------

def _search_recipe(options: SearchOptions) -> Recipe:
    recipe = load_recipe(options.recipe)
    if options.trust_pickle:
        recipe = recipe.trusting_pickle()
    where = str(recipe.path)
    if recipe.quantize is None or recipe.quantize.mode != "int8":
        raise ConfigError("quantize search keeps layers of an int8 build in float: the recipe "
                          "has no `quantize: {mode: int8, …}`", where=where, key="quantize",
                          hint="add `quantize: {mode: int8, calibration: …, max_drop: 0.01}`")
    if recipe.model.onnx:
        raise ConfigError("quantize search needs a PyTorch model (an ONNX QDQ model arrives "
                          "quantized)", where=where, key="model")
    if recipe.validation.dataset is None:
        raise ConfigError("quantize search scores candidates on the recipe's labelled set: "
                          "it has none", where=where, key="validation.dataset",
                          hint="add `validation.dataset: {samples: …, labels: …, metric: top1}`")
    max_drop = options.max_drop if options.max_drop is not None else \
        recipe.quantize.max_drop if recipe.quantize.max_drop is not None else \
        recipe.validation.dataset.max_drop
    quantize = recipe.quantize.model_copy(update={"max_drop": max_drop, "keep_float": None,
                                                  "search": None})
    return recipe.model_copy(update={"quantize": quantize})


def _measuring_target(name: str) -> str:
    """The target the candidates are built for: `name` when this machine runs its modules,
    else `host` (the quantized graph is the target's; its score is measured here)."""
    from edgekit.tune.measure import runs_here
    return name if runs_here(load_target(name)) else "host"


def _keeping(recipe: Recipe, kept: tuple[str, ...]) -> Recipe:
    """A candidate: `kept` float, no max_drop (the same candidate for any limit: cached)."""
    quantize = recipe.quantize.model_copy(update={"keep_float": kept, "max_drop": None})
    return recipe.model_copy(update={"quantize": quantize})


def _build(options: SearchOptions, recipe: Recipe, target: str, out: Path,
           say: Callable[[str], None], name: str) -> Bundle:
    from edgekit.api.build import build, recorded_steering
    say(f"{name}: building for {target}")
    built = build(BuildOptions(recipe=options.recipe, target=target, out=out,
                               trust_pickle=options.trust_pickle, recipe_override=recipe,
                               # steered as a build is, but kept by the full key only: a
                               # candidate is no source-keyed record (whose first build
                               # loads and exports the model twice)
                               steer=lambda digest, t: recorded_steering(digest, t)))
    say(f"{name}: built in {built.seconds:.1f} s "
        + ", ".join(f"{k} {v:.1f}" for k, v in built.stage_seconds.items() if v >= 0.5))
    return built.bundle


def _layer_errors(recipe: Recipe) -> tuple[list[LayerError], float]:
    """(each layer's error in the all-int8 model, execution order; the float model's dataset
    score). The error is bisect's: every module boundary tapped, the tapped model quantized
    as the build quantizes it, each tap compared with the float model's (profile, `fp32`
    column), worst over the dataset's first samples; a convolution with a batch norm folded
    into it is read at the norm's tap."""
    from edgekit.bisect.profile import profile
    from edgekit.bisect.taps import TorchGraph
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.pipeline.frontends.torch import eager_outputs
    from edgekit.pipeline.quantize.int8 import contraction_layers
    from edgekit.validate.dataset import load_set, score
    from edgekit.validate.tolerance import with_build_defaults
    frontend = frontend_for(recipe.model)
    loaded = frontend.load(recipe)
    exported = frontend.export(recipe, loaded)
    gate = recipe.validation.dataset
    samples, labels = load_set(recipe.resolve(gate.samples), recipe.resolve(gate.labels),
                               inputs=len(exported.inputs), limit=gate.limit,
                               where=str(recipe.path))
    # each graph made runnable once (program.module() per call costs more than the call)
    float_run = exported.program.module()
    reference = score(gate.metric, [eager_outputs(float_run, s) for s in samples], labels)
    graph = TorchGraph(exported.program, loaded.samples, loaded.input_names)
    layers = contraction_layers(graph.gm)
    taps = graph.boundary_taps()
    tapped = graph.exported(taps)
    all_int8 = recipe.model_copy(update={"quantize": recipe.quantize.model_copy(update={
        "keep_float": (), "max_drop": None, "search": None, "min_cosine": None})})
    quantized = frontend.quantize(all_int8, tapped)
    tolerances = with_build_defaults(recipe.validation, "int8")
    worst: dict[str, tuple[float | None, float]] = {}
    at = {t.module: i for i, t in enumerate(taps)}
    tapped_run, quantized_run = tapped.program.module(), quantized.program.module()
    for sample in samples[:PROFILE_SAMPLES]:
        fp32 = eager_outputs(tapped_run, sample)
        int8 = eager_outputs(quantized_run, sample)
        level = profile("layers", taps, list(int8), int8, tolerances, fp32=fp32,
                        folded_norms=True)
        for layer in layers:
            i = at.get(layer)
            if i is None:
                continue
            row = level.rows[i]
            if row.fp32 is None and i + 1 < len(level.rows):   # the norm folded into it
                row = level.rows[i + 1]
            if row.fp32 is None:
                continue
            cos, abs_err = worst.get(layer, (1.0, 0.0))
            now = row.fp32.cosine
            worst[layer] = (min(cos, now) if cos is not None and now is not None else None,
                            max(abs_err, row.fp32.max_abs_error))
    errors = [LayerError(layer=layer, cosine=worst[layer][0], max_abs_error=worst[layer][1])
              if layer in worst else LayerError(layer=layer) for layer in layers]
    return errors, reference


def dataset_score(bundle: Bundle) -> float:
    """The bundle's dataset set (as the gate runs it on a device) scored with its module in
    this process."""
    from edgekit.toolchain.iree import driver_for_threads
    from edgekit.toolchain.iree_runtime import InProcessModule
    from edgekit.validate.dataset import score
    m = bundle.manifest
    note = m.dataset
    module = InProcessModule(bundle.module, driver_for_threads(m.runtime_driver, 1),
                             m.entry_function)
    try:
        outputs = []
        for i in range(note.count):
            inputs = [np.load(bundle.file(p), allow_pickle=False) for p in note.sample_files(i)]
            outputs.append(tuple(module(inputs)))
    finally:
        module.close()
    labels = np.load(bundle.file(note.labels), allow_pickle=False)
    return score(note.metric, outputs, labels)


def _measured(name: str, kept: tuple[str, ...], score: float, metric: str, reference: float,
              quantized: bool) -> Measured:
    from edgekit.validate.dataset import drop
    return Measured(name=name, float_layers=kept, score=score,
                    drop=drop(metric, reference, score), quantized=quantized)


class _Measuring:
    """Where the candidates are scored and timed: in this process (`options.host` None), or on
    the device as trial releases (uploaded and validated as each candidate is built, removed
    when the search ends). Use as a context manager."""

    def __init__(self, options: SearchOptions, say: Callable[[str], None]) -> None:
        self.options, self.say = options, say
        self.name = "host" if options.host is None else options.host
        self.timing = "in this process" if options.host is None else f"on {options.host}"
        self.refused: list[tuple[str, str]] = []
        self._stack = contextlib.ExitStack()
        self._trial = None

    def __enter__(self) -> "_Measuring":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def scored(self, name: str, kept: tuple[str, ...], bundle: Bundle, metric: str,
               reference: float, quantized: bool) -> Measured | None:
        """The candidate scored on the labelled set; None when the device refused it."""
        if self.options.host is None:
            return _measured(name, kept, dataset_score(bundle), metric, reference, quantized)
        if self._trial is None:
            from edgekit.device.trial import trial_on_device
            self._trial = self._stack.enter_context(trial_on_device(
                self.options.host, self.options.identity, [bundle], self.say))
            problems = self._trial.problems[-1]
            address = self._trial.address
            self.name = self.options.host if self.options.host == address else \
                f"{self.options.host} ({address})"
        else:
            problems = self._trial.add(bundle)
        if problems is not None:
            self.say(f"{name}: refused on {self.name}: {problems}")
            self.refused.append((name, problems))
            return None
        self.say(f"{name}: scoring {bundle.manifest.dataset.count} samples on {self.name}")
        return _measured(name, kept, self._trial.dataset_score(bundle), metric, reference,
                         quantized)

    def timed(self, builds: list[tuple[Measured, Bundle]], rounds: int) -> list[Measured]:
        if self._trial is None:
            return _timed(builds, rounds)
        return _timed_on_device(self._trial, builds, rounds, self.say)


def _timed(builds: list[tuple[Measured, Bundle]], rounds: int) -> list[Measured]:
    """Each build's per-call p50 (ms) in this process, one thread, the builds interleaved
    round by round so the machine's slow spells hit all alike."""
    from edgekit.tune.measure import InProcessBench
    calls: dict[int, list[float]] = {i: [] for i in range(len(builds))}
    with InProcessBench() as bench:
        first = [float(np.median(bench(b, 1, 3))) for _, b in builds]
        # about 50 ms of calls per build and round
        per_round = [max(5, min(500, int(50 / max(ms, 1e-3)))) for ms in first]
        for _ in range(max(1, rounds)):
            for i, (_, bundle) in enumerate(builds):
                calls[i].extend(bench(bundle, 1, per_round[i]))
    return [dataclasses.replace(m, p50_ms=float(np.median(calls[i])))
            for i, (m, _) in enumerate(builds)]


DEVICE_CALLS = 20      # calls per build and round on a device (one benchmark process each)


def _timed_on_device(trial, builds: list[tuple[Measured, Bundle]], rounds: int,
                     say: Callable[[str], None]) -> list[Measured]:
    """Each build's p50 (ms) on the device: the median of its rounds' medians, each round one
    iree-benchmark-module process per build (one thread), the builds interleaved round by round
    so the device's slow spells hit all alike."""
    medians: dict[int, list[float]] = {i: [] for i in range(len(builds))}
    for r in range(max(1, rounds)):
        say(f"timing round {r + 1}/{rounds} on {trial.address}")
        for i, (_, bundle) in enumerate(builds):
            medians[i].append(float(np.median(trial.run_round(bundle, 1, DEVICE_CALLS))))
    return [dataclasses.replace(m, p50_ms=float(np.median(medians[i])))
            for i, (m, _) in enumerate(builds)]


# --- the report ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportRow:
    precision: str                  # fp32 | int8 | int8 + k float | this build
    score: float | None
    drop: float | None


@dataclass(frozen=True)
class QuantizeReport:
    app: str
    target: str
    mode: str
    metric: str | None
    float_layers: tuple[LayerError, ...]
    layers: tuple[LayerError, ...]          # every layer's error (from the search), worst first
    scores: tuple[ReportRow, ...]
    notes: tuple[str, ...] = ()


def report(path: Path, html: Path | None = None) -> QuantizeReport:
    """What a bundle's quantization cost and kept: per-layer errors, the float layers, the
    dataset score per precision (the search's, and this build's own measured here when this
    machine runs it); with `html`, also written there with a plot."""
    from edgekit.models.bundle import load_bundle
    from edgekit.validate.local import host_cannot_run
    with load_bundle(path) as bundle:
        m = bundle.manifest
        q = m.quantization
        if q is None:
            raise ConfigError("the bundle is not quantized: nothing to report",
                              where=str(bundle.path), key="quantization",
                              hint="build with `quantize: {mode: int8, …}`")
        notes: list[str] = []
        search = q.search
        metric = search.metric if search else (m.dataset.metric if m.dataset else None)
        rows: list[ReportRow] = []
        if search:
            rows.append(ReportRow("fp32", search.reference_score, 0.0))
            rows.extend(ReportRow("int8" if c.float_layers == 0 else
                                  f"int8 + {c.float_layers} float", c.score, c.drop)
                        for c in search.candidates)
        elif m.dataset and m.dataset.reference == "fp32":
            rows.append(ReportRow("fp32", m.dataset.reference_score, 0.0))
        if m.dataset:
            reason = host_cannot_run(bundle)
            if reason is None:
                bundle.verify()
                own = dataset_score(bundle)
                from edgekit.validate.dataset import drop
                ref = search.reference_score if search else m.dataset.reference_score
                rows.append(ReportRow(f"this build ({q.mode}, {len(q.float_layers)} float)",
                                      own, drop(m.dataset.metric, ref, own)))
            else:
                notes.append(f"this build's own score not measured here: {reason}")
        else:
            notes.append("the bundle has no dataset set (`validation.dataset`): no scores")
        if not search:
            notes.append("no search recorded: per-layer errors come from `edgekit quantize "
                          "search` (or `quantize.max_drop` in the recipe)")
        result = QuantizeReport(app=m.app, target=m.target, mode=q.mode, metric=metric,
                                float_layers=q.float_layers,
                                layers=search.layers if search else (),
                                scores=tuple(rows), notes=tuple(notes))
    if html is not None:
        from edgekit.report.quantize_html import render_quantize_report
        html.write_text(render_quantize_report(result))
    return result


__all__ = ["SearchOptions", "SearchResult", "search", "searched_options", "build_searched",
           "chosen_recipe", "refuse_unmet", "dataset_score", "report", "QuantizeReport",
           "ReportRow"]
