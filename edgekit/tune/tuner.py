"""`edgekit tune`: measure lowering × flag set × threads for one model and target, keep the
fastest variant that validates, and make builds use it.

Candidates are ordinary builds with the variant applied (so each is cached: re-tuning only
re-measures). Each is validated against the golden outputs where it will run — on this machine
for a target it can execute, else on the device given by `--host` (uploaded as a release
directory, never activated) — and timed in the runtime the bundle will run in (measure.py):
in this process through the lean call path for a target this machine runs, with the device's
iree-benchmark-module for `--host`; one call per sample, in rounds interleaved across
candidates so drift hits all alike (a round lasts at least ROUND_SECONDS). The score is the
median of the per-round medians. Thread counts are a budget: the untuned build runs with the
largest, and any candidate at that count or fewer replaces it only if it beats it round by
round (`clearly_faster`), so a tuned build is never slower than the untuned one beyond the
measured noise. A choice made among many candidates is the luckiest of them as much as the
fastest, so once every stage has chosen, the winner and the untuned build are measured again in
fresh interleaved rounds, and the winner stays only if it wins there too (`confirmation`; the
record says "win repeated" or "win not repeated"). The choice is recorded per
model digest, target and toolchain version in $EDGEKIT_HOME/tuning/, and `edgekit build` /
`deploy` use it from then on (the manifest says so; `--no-tuned` builds the profile's default).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit import speed
from edgekit.config.paths import edgekit_home
from edgekit.config.profiles import Target, load_target
from edgekit.config.recipe import load_recipe
from edgekit.config.schema_base import Frozen
from edgekit.device.bench import per_call_ms
from edgekit.device.trial import trial_on_device
from edgekit.errors import ConfigError, EdgekitError, ToolError
from edgekit.models.bundle import Bundle, TuningNote
from edgekit.pipeline.build import BuildOptions, Variant, build
from edgekit.toolchain import iree
from edgekit.toolchain.versions import toolchain_versions
from edgekit.tune.measure import InProcessBench, measuring_runtime, runs_here
from edgekit.validate.local import validate_local

DEFAULT_SET = "default"


class CandidateResult(Frozen):
    lowering: str
    flag_set: str
    flags: tuple[str, ...]
    threads: int
    status: str                       # ok | build-failed | invalid | bench-failed
    reason: str = ""
    p50_ms: float | None = None       # median of the per-round medians
    round_p50_ms: tuple[float, ...] = ()
    module_bytes: int = 0

    @property
    def variant(self) -> str:
        return f"{self.lowering}/{self.flag_set}"


class TuningRecord(Frozen):
    model_digest: str
    app: str
    target: str
    toolchain: dict[str, str]
    measured_on: str
    created_at: str
    chosen: CandidateResult
    default_variant: str              # what a build without tuning produces
    default_p50_ms: float | None      # its p50 at the chosen thread count
    candidates: tuple[CandidateResult, ...]
    # the fastest candidate against the untuned build, round by round: the median gain and the
    # noise a gain had to beat (None: no untuned build to pair with)
    fastest: str = ""
    gain_pct: float | None = None
    noise_pct: float | None = None
    # the runtime the candidates were timed in (measure.py); older records: tools
    measured_in: str = "tools"
    # the winner against the untuned build in fresh rounds (`confirmation`): "win repeated: …",
    # "win not repeated: …" (then the untuned build is chosen), or why nothing was confirmed
    confirmation: str = ""


@dataclass(frozen=True)
class TuneOptions:
    recipe: Path
    target: str
    host: str | None = None           # a device, for targets this machine cannot run
    identity: Path | None = None
    lowerings: tuple[str, ...] | None = None    # default: the profile's
    flag_sets: tuple[str, ...] | None = None    # default: all the profile lists
    threads: tuple[int, ...] | None = None      # default: the profile's tune.threads
    runtime: str | None = None        # in-process | tools | auto; default: the recipe's
                                      # tune.runtime, else the profile's
    rounds: int = 5
    repetitions: int = 30             # measured calls per candidate and thread count
    use_cache: bool = True
    conv_choice: bool = False         # then choose direct or im2col per convolution
    dispatches: int = 0               # then search tile sizes of this many hot dispatches
    per_dispatch: int = 4             # tile-size candidates per dispatch


Progress = Callable[[str], None]


def tune(options: TuneOptions, on_progress: Progress | None = None) -> TuningRecord:
    say = on_progress or (lambda _: None)
    recipe = load_recipe(options.recipe)
    target = load_target(options.target)
    variants = candidate_variants(target, options.lowerings, options.flag_sets)
    threads = tuple(dict.fromkeys(options.threads or target.tune.threads))
    runtime = measuring_runtime(runtime_choice(options.runtime, recipe, target), target,
                                options.host)
    options = dataclasses.replace(options, runtime=runtime)   # resolved for what measures
    if target.runtime.driver != "local-task":
        threads = (1,)        # local-sync / Vulkan: CPU threads do not apply
    with tempfile.TemporaryDirectory(prefix="edgekit-tune-") as tmp:
        built: list[tuple[Variant, Bundle]] = []
        failed: list[CandidateResult] = []
        for i, variant in enumerate(variants, start=1):
            say(f"building {variant.name} ({i}/{len(variants)})")
            try:
                result = build(BuildOptions(recipe=options.recipe, target=options.target,
                                            out=Path(tmp) / f"candidate-{i}",
                                            use_cache=options.use_cache, variant=variant))
            except EdgekitError as exc:
                failed += [_result(variant, t, "build-failed", _one_line(exc)) for t in threads]
                continue
            built.append((variant, result.bundle))
        if not built:
            raise ConfigError("no candidate variant built", key="tune",
                              hint="; ".join(f"{c.variant}: {c.reason}" for c in failed[:4]))
        distinct, copies = split_identical(built)
        if options.host is None and runs_here(target):
            results = _tune_here(options, distinct, threads, say)
        else:
            results = _tune_on_device(options, target, distinct, threads, say)
    results += [same_as(r, variant) for variant, original in copies for r in results
                if r.variant == original.name]
    results += failed
    valid = [r for r in results if r.status == "ok"]
    if not valid:
        raise ConfigError("no candidate variant validated", key="tune",
                          hint="; ".join(f"{r.variant} ({r.threads}t): {r.status} {r.reason}"
                                         for r in results[:6]))
    # without tuning, a build takes the profile's first lowering that works, with no extra flags
    default_variant = next((f"{lw}/{DEFAULT_SET}" for lw in target.lowering
                            if any(r.variant == f"{lw}/{DEFAULT_SET}" for r in valid)), "")
    chosen, default = choose(valid, default_variant)
    if options.conv_choice:
        from edgekit.tune.conv_choice import choose_convs
        chosen, tried = choose_convs(options, target, chosen, say)
        results += tried
    if options.dispatches > 0:
        from edgekit.tune.dispatch_search import search_dispatches
        chosen, searched = search_dispatches(options, target, chosen, say)
        results += searched
    confirmation = ""
    if default is not None and chosen != default:
        chosen, confirmation = confirmed_choice(options, target, chosen, default, say)
    fastest = min(valid, key=lambda r: r.p50_ms)
    say(f"chosen {chosen.variant} at {chosen.threads} thread(s) (measured {runtime})")
    paired = paired_gain(fastest, default) if default is not None else None
    record = TuningRecord(
        model_digest=built[0][1].manifest.model_digest, app=recipe.name, target=target.name,
        toolchain=toolchain_versions(), measured_on=options.host or "host",
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        chosen=chosen, default_variant=default_variant,
        default_p50_ms=default.p50_ms if default else None,
        fastest=f"{fastest.variant} ({fastest.threads}t)", measured_in=runtime,
        gain_pct=paired[0] if paired else None, noise_pct=paired[1] if paired else None,
        confirmation=confirmation,
        candidates=tuple(sorted(results, key=lambda r: (r.p50_ms is None, r.p50_ms or 0))))
    _store(record, target)
    return record


def runtime_choice(option: str | None, recipe, target: Target) -> str:
    """Where candidates are timed, as asked: `--runtime`, else the recipe's `tune.runtime`,
    else the profile's (the recipe knows how its model is used; the profile, the board)."""
    return option or (recipe.tune.runtime if recipe.tune else None) or target.tune.runtime


def choose(valid: list[CandidateResult], default_variant: str, budget: int | None = None
           ) -> tuple[CandidateResult, CandidateResult | None]:
    """(the candidate builds should use, the untuned build it had to beat) among the valid
    candidates at `budget` threads or fewer (None: all measured).

    The thread counts are a budget: the untuned build runs with the largest one measured, and
    that is the reference. The choice is the fastest of the candidates — any variant, any
    thread count up to the budget, the untuned build at fewer threads included — that beat the
    reference round by round beyond the noise (`clearly_faster`); when none does, the untuned
    build itself: a choice made from noise would change on every re-tune, and could be
    slower than not tuning. Without an untuned build among them: the fastest."""
    pool = [r for r in valid if r.p50_ms is not None and (budget is None or r.threads <= budget)]
    if not pool:
        raise ValueError("no measured candidate within the thread budget")
    top = max(r.threads for r in pool)
    reference = next((r for r in pool if r.variant == default_variant and r.threads == top),
                     None)
    if reference is None:
        return min(pool, key=lambda r: r.p50_ms), None
    winners = [r for r in pool if r is not reference and clearly_faster(r, reference)]
    return (min(winners, key=lambda r: r.p50_ms) if winners else reference), reference


# --- the winner, confirmed -----------------------------------------------------------------------

REPEATED, NOT_REPEATED = "win repeated", "win not repeated"


def confirmation(chosen: CandidateResult, default: CandidateResult,
                 chosen_again: CandidateResult | None, default_again: CandidateResult | None
                 ) -> tuple[CandidateResult, str]:
    """(what builds use, the record's note) once the winner `chosen` and the untuned build
    `default` were measured again in fresh interleaved rounds (`*_again`, None: missing). The
    winner stays only when edgekit's one rule (speed.verdict, through `clearly_faster`) calls
    it faster in those rounds alone: the first stage picked it as the best of many noisy
    figures, and a win it owes to one lucky window does not repeat (the KWS MLP's tuned build
    read 1.21× onnxruntime against the untuned 1.11× in a noisy run). Otherwise `default`."""
    fresh = len(default_again.round_p50_ms) if default_again is not None else 0
    what = f"{chosen.variant} ({chosen.threads}t) against the untuned " \
           f"{default.variant} ({default.threads}t)"
    for again in (chosen_again, default_again):
        if again is None or again.status != "ok":
            why = "missing" if again is None else f"{again.status} {again.reason}".strip()
            return default, f"{NOT_REPEATED}: {what}: the re-measurement failed ({why})"
    found = _against(chosen_again, default_again)
    figures = "" if found is None else (
        f" {found.change_pct:+.1f}% ±{100 * found.noise:.1f}% in {fresh} fresh rounds "
        f"(faster in {found.faster_rounds})")
    if clearly_faster(chosen_again, default_again):
        return chosen, f"{REPEATED}: {what}{figures}"
    call = found.call if found is not None else "not comparable"
    return default, f"{NOT_REPEATED}: {what}{figures}, {call}; the untuned build is kept"


def confirmed_choice(options: TuneOptions, target: Target, chosen: CandidateResult,
                     default: CandidateResult, say: Progress) -> tuple[CandidateResult, str]:
    """`confirmation` after measuring both again: their builds (cache hits), validated and
    timed as every candidate is, in options.rounds new rounds interleaved between the two."""
    variants = {r.variant: Variant(r.lowering, r.flag_set, r.flags) for r in (default, chosen)}
    threads = tuple(dict.fromkeys((default.threads, chosen.threads)))
    say(f"confirming {chosen.variant} ({chosen.threads}t) against the untuned "
        f"{default.variant} ({default.threads}t) in {options.rounds} fresh rounds")
    with tempfile.TemporaryDirectory(prefix="edgekit-tune-confirm-") as tmp:
        built = []
        for i, variant in enumerate(variants.values()):
            try:
                built.append((variant, build(BuildOptions(
                    recipe=options.recipe, target=options.target, out=Path(tmp) / f"b{i}",
                    use_cache=options.use_cache, variant=variant)).bundle))
            except EdgekitError as exc:
                note = f"{NOT_REPEATED}: {variant.name} does not build again ({_one_line(exc)})"
                say(note)
                return default, note
        again = measure(options, target, built, threads, say)
    found = {(r.variant, r.threads): r for r in again}
    kept, note = confirmation(chosen, default, found.get((chosen.variant, chosen.threads)),
                              found.get((default.variant, default.threads)))
    say(note)
    return kept, note


SecondLook = Callable[[list[str]], list[CandidateResult]]


def kept_refinement(chosen: CandidateResult, base: CandidateResult | None,
                    tried: list[CandidateResult], say: Progress | None = None,
                    second_look: SecondLook | None = None) -> CandidateResult:
    """What a search step (`--conv-choice`, `--dispatches`) leaves chosen: its fastest valid
    candidate when clearly faster than `base` (the chosen variant re-measured in the same
    rounds), else `chosen` as it was. `say` tells which, with both figures (the base's
    re-measurement is not a row of the record: it can differ from the first stage's).

    A candidate that wins but not clearly (`near_miss`) gets a second look when the step can
    measure again: `second_look([base, candidate names])` measures both in new interleaved rounds,
    and the decision is taken on all their rounds together (ResNet18-like's combined dispatch
    tiles read +2.0 %, +4.5 % and +8.7 % in three tunes: a gain near the 3 % bar is kept or not
    by one run's luck; more rounds narrow the noise, the bar stays)."""
    valid = [r for r in tried if r.status == "ok"]
    if base is None or base.status != "ok" or not valid:
        return chosen
    fastest = best = min(valid, key=lambda r: r.p50_ms)
    kept = clearly_faster(best, base)
    if not kept and second_look is not None and near_miss(best, base):
        if say is not None:
            _say_decision(say, "a second look for", best, base)
        remeasured = {r.variant: r for r in second_look([base.variant, best.variant])}
        base, best = (pooled(r, remeasured.get(r.variant)) for r in (base, best))
        kept = base.status == best.status == "ok" and clearly_faster(best, base)
    if say is not None:
        _say_decision(say, "kept" if kept else "not kept", best, base)
    return fastest if kept else chosen      # its row as the record lists it


def _say_decision(say: Progress, verdict: str, best: CandidateResult,
                 base: CandidateResult) -> None:
    if best.p50_ms is None or base.p50_ms is None:
        say(f"{verdict}: {best.variant}: {best.reason or base.reason}")
        return
    gain = paired_gain(best, base)
    say(f"{verdict}: {best.variant} p50 {best.p50_ms:.4g} ms against {base.p50_ms:.4g} ms for "
        f"{base.variant} in the same {len(base.round_p50_ms)} rounds"
        + (f" ({gain[0]:+.1f}% ± {gain[1]:.1f}%)" if gain else ""))


def near_miss(a: CandidateResult, b: CandidateResult) -> bool:
    """`a` looks faster than `b` (by more than 1 %, in at least half the paired rounds) but not
    clearly (`clearly_faster`): worth more rounds before deciding."""
    found = _against(a, b)
    if found is None or not found.rounds or found.call == speed.FASTER:
        return False
    return -found.change_pct > 1.0 and 2 * found.faster_rounds >= found.rounds


def pooled(first: CandidateResult, second: CandidateResult | None) -> CandidateResult:
    """`first` with the rounds of its re-measurement `second` added (p50 over all of them);
    `second` itself when that measurement failed, None as a failed one."""
    if second is None:
        return first.model_copy(update={"status": "bench-failed",
                                        "reason": "missing from the second look"})
    if second.status != "ok":
        return second
    rounds = (*first.round_p50_ms, *second.round_p50_ms)
    return first.model_copy(update={"round_p50_ms": rounds,
                                    "p50_ms": round(float(np.median(rounds)), 5)})


def _against(a: CandidateResult, b: CandidateResult,
             bar: float = speed.DEFAULT_BAR) -> speed.Verdict | None:
    """`a` (B) against `b` (A) by edgekit's one rule (edgekit/speed.py): their rounds were
    interleaved, so round r of both ran at nearly the same time and they pair; rounds that
    cannot pair compare as two runs. None: one was not measured."""
    if a.p50_ms is None or b.p50_ms is None or not a.round_p50_ms or not b.round_p50_ms:
        return None
    paired = len(a.round_p50_ms) == len(b.round_p50_ms)
    try:
        rounds = speed.PairedRounds(base=b.round_p50_ms, new=a.round_p50_ms, paired=paired,
                                    medians=None if paired else (b.p50_ms, a.p50_ms))
    except ValueError:        # a figure no timing gives (zero): nothing to decide on
        return None
    return speed.verdict(rounds, bar)


def paired_gain(a: CandidateResult, b: CandidateResult) -> tuple[float, float] | None:
    """How much faster `a` is than `b`, in % (the median over paired rounds of 1 - a/b), and
    the noise of that figure (speed.verdict's). None when the rounds cannot be paired."""
    found = _against(a, b)
    if found is None or not found.rounds:
        return None
    return round(-found.change_pct, 2), round(100 * found.noise, 2)


def clearly_faster(a: CandidateResult, b: CandidateResult,
                   min_gain: float = speed.DEFAULT_BAR) -> bool:
    """`a` beats `b` by edgekit's one rule (edgekit/speed.py): by more than 3% and more than
    the noise of the pairing, in at least two rounds of three."""
    if a is b:
        return False
    found = _against(a, b, min_gain)
    return found is not None and found.call == speed.FASTER


def split_identical(built: list[tuple[Variant, Bundle]]
                    ) -> tuple[list[tuple[Variant, Bundle]], list[tuple[Variant, Variant]]]:
    """(candidates with distinct modules, [(variant, the earlier variant with the same module)]).
    A flag set can leave a model's module byte for byte as another set leaves it (a conv
    rewrite on a model without convolutions): measuring both would only let noise pick
    between copies, and cost the time of another candidate."""
    first: dict[str, Variant] = {}
    distinct, copies = [], []
    for variant, bundle in built:
        digest = hashlib.sha256(bundle.module.read_bytes()).hexdigest()
        if digest in first:
            copies.append((variant, first[digest]))
        else:
            first[digest] = variant
            distinct.append((variant, bundle))
    return distinct, copies


def same_as(result: CandidateResult, variant: Variant) -> CandidateResult:
    """`result` (measured for an identical module) reported for `variant`."""
    note = f"same module as {result.variant}"
    return result.model_copy(update={
        "lowering": variant.lowering, "flag_set": variant.flag_set, "flags": variant.flags,
        "reason": f"{note}; {result.reason}" if result.reason else note})


def candidate_variants(target: Target, lowerings: tuple[str, ...] | None,
                       flag_sets: tuple[str, ...] | None) -> list[Variant]:
    sets = {DEFAULT_SET: (), **target.tune.flag_sets}
    names = flag_sets or tuple(sets)
    unknown = [n for n in names if n not in sets]
    if unknown:
        raise ConfigError(f"unknown flag set(s) {', '.join(unknown)} for {target.name}",
                          key="flag-sets", hint=f"the profile lists: {', '.join(sets)}")
    chosen_lowerings = lowerings or target.lowering
    bad = [lw for lw in chosen_lowerings if lw not in ("tosa", "linalg", "torch")]
    if bad:
        raise ConfigError(f"unknown lowering(s) {', '.join(bad)}", key="lowerings",
                          hint="choose from tosa, linalg, torch")
    return [Variant(lw, name, tuple(sets[name])) for lw in chosen_lowerings for name in names]


def _result(variant: Variant, threads: int, status: str, reason: str = "",
            **fields) -> CandidateResult:
    return CandidateResult(lowering=variant.lowering, flag_set=variant.flag_set,
                           flags=variant.flags, threads=threads, status=status, reason=reason,
                           **fields)


def _one_line(exc: Exception) -> str:
    text = exc.what if isinstance(exc, EdgekitError) else str(exc)
    return text.strip().splitlines()[0][:300] if text.strip() else type(exc).__name__


# --- on this machine ---------------------------------------------------------------------------

def _tune_here(options: TuneOptions, built: list[tuple[Variant, Bundle]],
               threads: tuple[int, ...], say: Progress) -> list[CandidateResult]:
    """Validate here, then time in options.runtime: in-process (also when unresolved: what
    `auto` means here) or tools (this machine's iree-benchmark-module)."""
    results: list[CandidateResult] = []
    measurable: list[tuple[Variant, Bundle]] = []
    for variant, bundle in built:
        say(f"validating {variant.name}")
        try:
            report = validate_local(bundle.path)
        except EdgekitError as exc:
            results += [_result(variant, t, "invalid", _one_line(exc)) for t in threads]
            continue
        if not report.ok:
            problems = "; ".join(p for o in report.outputs for p in o.problems)
            results += [_result(variant, t, "invalid", problems) for t in threads]
            continue
        measurable.append((variant, bundle))
    if options.runtime != "tools":
        with InProcessBench() as bench:
            samples = _interleaved(measurable, threads, options, say, bench)
    else:
        samples = _interleaved(measurable, threads, options, say,
                               lambda bundle, t, n: bench_local(bundle, t, n, warmup=3))
    for (variant, bundle), per_thread in zip(measurable, samples):
        size = bundle.module.stat().st_size
        for t, rounds in per_thread.items():
            results.append(_scored(variant, t, rounds, size))
    return results


def bench_local(bundle: Bundle, threads: int, repetitions: int, warmup: int) -> list[float]:
    """Per-call ms from this machine's iree-benchmark-module on the bundle's golden inputs."""
    m = bundle.manifest
    driver = iree.driver_for_threads(m.runtime_driver, threads)
    argv = [iree.tool_path("iree-benchmark-module"), f"--module={bundle.module}",
            f"--device={driver}", f"--function={m.entry_function}",
            *[f"--input=@{bundle.file(p)}" for p in m.golden_inputs],
            "--benchmark_format=json", f"--benchmark_repetitions={repetitions + warmup}",
            "--benchmark_min_time=1x"]
    if driver == "local-task":
        argv.append(f"--task_topology_group_count={threads}")
    proc = subprocess.run(argv, capture_output=True, timeout=3600)
    if proc.returncode != 0:
        raise ToolError("iree-benchmark-module failed", argv=argv, returncode=proc.returncode,
                        stderr_tail=proc.stderr.decode(errors="replace")[-2000:])
    return per_call_ms(json.loads(proc.stdout))[warmup:]


# A round shorter than this is mostly the benchmark process's start and the machine's jitter
# (a 2 ms model got 4 calls a round); after the first round, short models get more calls.
ROUND_SECONDS = 0.2
MAX_CALLS_PER_ROUND = 500


def _interleaved(measurable, threads, options: TuneOptions, say: Progress, run_round):
    """rounds × candidates × threads, candidates interleaved inside each round."""
    per_round = max(2, -(-options.repetitions // options.rounds))
    calls: dict[tuple[int, int], int] = {}
    samples = [{t: [] for t in threads} for _ in measurable]
    for r in range(options.rounds):
        for i, (variant, bundle) in enumerate(measurable):
            for t in threads:
                say(f"benchmarking round {r + 1}/{options.rounds}: {variant.name}, {t} thread(s)")
                try:
                    ms = run_round(bundle, t, calls.get((i, t), per_round))
                except EdgekitError as exc:
                    samples[i][t].append(exc)
                    continue
                samples[i][t].append(ms)
                if (i, t) not in calls:
                    calls[(i, t)] = calls_per_round(per_round, float(np.median(ms)))
    return samples


def calls_per_round(minimum: int, call_ms: float) -> int:
    """Enough calls for a round of ROUND_SECONDS (at least `minimum`, at most the cap)."""
    wanted = int(ROUND_SECONDS * 1e3 / max(call_ms, 1e-6))
    return max(minimum, min(MAX_CALLS_PER_ROUND, wanted))


def _scored(variant: Variant, threads: int, rounds: list, size: int) -> CandidateResult:
    errors = [r for r in rounds if isinstance(r, Exception)]
    if errors:
        return _result(variant, threads, "bench-failed", _one_line(errors[0]), module_bytes=size)
    medians = [float(np.median(r)) for r in rounds]
    return _result(variant, threads, "ok", p50_ms=round(float(np.median(medians)), 5),
                   round_p50_ms=tuple(round(m, 5) for m in medians), module_bytes=size)


# --- on a device -------------------------------------------------------------------------------

def _tune_on_device(options: TuneOptions, target: Target, built: list[tuple[Variant, Bundle]],
                    threads: tuple[int, ...], say: Progress) -> list[CandidateResult]:
    if options.host is None:
        raise ConfigError(f"this machine cannot run {target.name} modules", key="host",
                          hint="pass --host DEVICE to measure on the device")
    results: list[CandidateResult] = []
    with trial_on_device(options.host, options.identity, [b for _, b in built], say) as trial:
        measurable = []
        for (variant, bundle), problems in zip(built, trial.problems):
            if problems is not None:
                results += [_result(variant, t, "invalid", problems) for t in threads]
            else:
                measurable.append((variant, bundle))
        samples = _interleaved(measurable, threads, options, say, trial.run_round)
    for (variant, bundle), per_thread in zip(measurable, samples):
        for t, rounds in per_thread.items():
            results.append(_scored(variant, t, rounds, bundle.module.stat().st_size))
    return results


def measuring_again(options: TuneOptions, target: Target, built: list[tuple[Variant, Bundle]],
                    threads: tuple[int, ...], say: Progress) -> SecondLook:
    """kept_refinement's second look: the named candidates of `built`, measured again."""
    return lambda names: measure(options, target, [(v, b) for v, b in built if v.name in names],
                                 threads, say)


def refined(options: TuneOptions, target: Target, chosen: CandidateResult,
            base: tuple[Variant, Bundle], to_measure: list[tuple[Variant, Bundle, str]],
            say: Progress, paired_note: bool = False
            ) -> tuple[CandidateResult, list[CandidateResult]]:
    """A search step's last move: its builds measured against the chosen variant's (`base`,
    re-measured in the same rounds), each row's reason its note (`paired_note`: led by its gain
    paired with the base's rounds), and kept_refinement's decision — with its second look on
    these same builds, so the caller calls it while they exist. (what stays chosen, the rows)"""
    built = [base, *[(v, b) for v, b, _ in to_measure]]
    threads = (chosen.threads,)
    measured = measure(options, target, built, threads, say)
    notes = {v.name: note for v, _, note in to_measure}
    again = next((r for r in measured if r.variant == base[0].name), None)

    def against_base(r: CandidateResult) -> str:
        # its rounds are paired with the chosen variant's in this step, not the first's
        paired = paired_gain(r, again) if paired_note and again is not None else None
        return "" if paired is None else (f"vs {base[0].name} in the same rounds: "
                                          f"{paired[0]:+.1f}% ± {paired[1]:.1f}%")
    tried = [r.model_copy(update={"reason": "; ".join(filter(None, (
        against_base(r), notes.get(r.variant), r.reason)))})
        for r in measured if r.variant != base[0].name]
    second_look = measuring_again(options, target, built, threads, say)
    return kept_refinement(chosen, again, tried, say, second_look), tried


def measure(options: TuneOptions, target: Target, built: list[tuple[Variant, Bundle]],
            threads: tuple[int, ...], say: Progress) -> list[CandidateResult]:
    """Validate and benchmark built candidates where the target runs (tune/dispatch_search)."""
    if options.host is None and runs_here(target):
        return _tune_here(options, built, threads, say)
    return _tune_on_device(options, target, built, threads, say)


# --- the record that builds use ----------------------------------------------------------------

def tuning_dir() -> Path:
    return edgekit_home() / "tuning"


def record_path(model_digest: str, target: Target) -> Path:
    toolchain = hashlib.sha256(json.dumps(toolchain_versions(), sort_keys=True).encode())
    return tuning_dir() / (f"{model_digest[:16]}-{target.name}-{target.fingerprint()[:8]}-"
                           f"{toolchain.hexdigest()[:8]}.json")


def _store(record: TuningRecord, target: Target) -> Path:
    path = record_path(record.model_digest, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record.model_dump_json(indent=1))
    tmp.replace(path)
    return path


def load_record(model_digest: str, target: Target) -> TuningRecord | None:
    path = record_path(model_digest, target)
    if not path.is_file():
        return None
    try:
        return TuningRecord.model_validate_json(path.read_text())
    except ValueError:
        return None     # a record from another edgekit version: tune again


def tuned_choice(model_digest: str, target: Target) -> TuningNote | None:
    """What `build` applies: the recorded choice for this model, target profile and
    toolchain (None when never tuned, or tuned with another toolchain or profile)."""
    record = load_record(model_digest, target)
    if record is None:
        return None
    c = record.chosen
    return TuningNote(variant=c.variant, lowering=c.lowering, flag_set=c.flag_set,
                      flags=c.flags, threads=c.threads, p50_ms=c.p50_ms,
                      default_p50_ms=record.default_p50_ms, measured_on=record.measured_on,
                      measured_in="in-process" if record.measured_in == "in-process"
                      else "tools", tuned_at=record.created_at)


__all__ = ["TuneOptions", "TuningRecord", "CandidateResult", "tune", "tuned_choice",
           "candidate_variants"]
