"""`edgekit tune --dispatches N`: after the lowering × flag set × threads choice, search tile
sizes for the N dispatches that cost the most, starting from what the compiler chose.

1. Build the chosen variant once more with IREE's configuration dump
   (toolchain/iree_configs.py: each dispatch's root op and its tile sizes).
2. Rank the dispatches by IREE's HAL profiler (iree-benchmark-module
   `--device_profiling_mode=host-execution`, read by `iree-profile dispatch`, as
   bench/dispatch_profile.py): here, or for a target measured on a device, there (the
   device's own tool; the trace is read here). When no profile can be had, by the FLOPs
   IREE's dispatch names give (static, and said so).
3. For each, a few tile sizes around the compiler's (tune/dispatch_configs.py), each a
   candidate module: the variant's flags + `--edgekit-dispatch-configs=<sha256>` (the edited
   executables, kept by content digest under $EDGEKIT_HOME/tuning/dispatch-configs/; the
   digest enters the build key, the tuning record and the manifest's TuningNote). Each
   edited executable is compiled on its own first (`--compile-mode=hal-executable`, ~1 s):
   tiles IREE rejects, and dispatches whose printed configuration does not compile again,
   cost no model build.
4. Here: screen the candidates by their own dispatch's time in the HAL profile (interleaved
   with the variant's, best of SCREEN_ROUNDS: a single kernel's time is far steadier than a
   whole model's), keep each dispatch's best tiles when they beat the compiler's by
   SCREEN_GAIN, and combine them into one set. On a device: every candidate goes on.
   Beside the search, rule-made candidates (RULES: "weights once" for data-tiled matmuls of
   few rows, "wide accumulators" for matrix-vector products, "two-vector tiles" for matmuls
   of 7-8 rows by one vector) edit every dispatch they apply to at once; each is measured
   whole, and with the winners; a rule's edit of each dispatch is screened beside the
   searched tiles too, so that dispatch keeps the faster.
5. Measure what is left against the chosen variant as the tuner measures everything
   (validated, interleaved rounds, same thread count) and take it only if it clearly beats
   the variant round by round (tuner.clearly_faster).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.models.bundle import DISPATCH_CONFIGS, Bundle, check_payload_name
from edgekit.pipeline.build import BuildOptions, Variant, build
from edgekit.toolchain import iree
from edgekit.toolchain.iree_configs import ConfiguredDispatch, read_configured
from edgekit.toolchain.iree_profile import dispatch_groups, profiled_run
from edgekit.tune.dispatch_configs import (candidate_levels, flop_count, hot_dispatches,
                                           set_digest, two_vector_tiles, weights_once,
                                           wide_accumulators, with_levels)

DUMP_FLAG = "--iree-hal-dump-executable-configurations-to="
# IREE inlines small constants (a tiny model's weights, a bias) into dispatches as
# dense_resource<…>, and its configuration dump prints the reference without the blob: such an
# executable does not compile again ("resource does not exist"). Searched with constants kept
# out of dispatches (as bindings), its configured source is whole.
NO_INLINED_CONSTANTS = "--iree-flow-inline-constants-max-byte-length=0"


def profile_ms(bundle: Bundle, work: Path, threads: int = 1, iterations: int = 5
               ) -> Costs:
    """{dispatch function: ms per inference at its fastest call} from IREE's HAL profiler,
    run with the thread count being tuned (a dispatch's distribution over two workers is
    what a 2-thread budget pays: MobileNetV2-like's 14x14 depthwise convolutions run 1.1x
    faster on two workers where its matmuls run 1.6-1.8x)."""
    return costs_of(*profiled_run(bundle, iterations, work, threads))


class Costs(dict):
    """{dispatch function: ms per inference}, and how many calls per inference that is."""

    def __init__(self, *args, calls: dict[str, float] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: dict[str, float] = dict(calls or {})


def costs_of(run: dict, groups: list[dict]) -> Costs:
    """profile_ms's figures from a benchmark record and its trace's dispatch groups."""
    runs = run["iterations"]
    costs = Costs()
    for g in groups:
        # the fastest call × calls per inference: on a shared machine the totals swing
        # 2-3× between runs while a kernel's fastest call holds within ~1-2%
        costs[g["key"]] = costs.get(g["key"], 0.0) + g["min_ns"] / 1e6 * g["count"] / runs
        costs.calls[g["key"]] = costs.calls.get(g["key"], 0.0) + g["count"] / runs
    return costs


@dataclass(frozen=True)
class Candidate:
    variant: Variant
    dispatch: ConfiguredDispatch
    files: dict[str, str]             # {executable: edited configured source}
    label: str                        # dispatch:level=tiles (what changed)


def candidates_for(hot: list[ConfiguredDispatch], base: Variant, per_dispatch: int
                   ) -> list[Candidate]:
    """One candidate per (dispatch, tile sizes)."""
    out = []
    for d in hot:
        # mmt4d's register tile is the data-tiling layout's inner tile: not moved
        for levels in candidate_levels(d.levels, limit=per_dispatch,
                                       vector_moves=not d.root_name.endswith("mmt4d")):
            text = with_levels(d.source, d.lowering_config, levels, d.levels)
            if text is None:
                continue
            changed = "+".join(f"{name}={'x'.join(map(str, sizes))}"
                               for (name, sizes), (_, was) in zip(levels, d.levels)
                               if sizes != was)
            label = f"{d.executable}:{changed}"
            files = {d.executable: text}
            out.append(Candidate(with_configs(base, files, label), d, files, label))
    return out


def shared_builds(candidates: list[Candidate], base: Variant
                  ) -> list[tuple[Variant, list[Candidate]]]:
    """The candidates in builds: the k-th candidate of each dispatch in build k (one
    executable each, so they never edit the same one). Cuts the model builds from
    dispatches × per-dispatch to per-dispatch; a single candidate keeps its own variant."""
    rank: dict[str, int] = {}
    groups: list[list[Candidate]] = []
    for c in candidates:
        k = rank[c.dispatch.executable] = rank.get(c.dispatch.executable, -1) + 1
        if k == len(groups):
            groups.append([])
        groups[k].append(c)
    out = []
    for k, members in enumerate(groups):
        if len(members) == 1:
            out.append((members[0].variant, members))
            continue
        files = {e: t for c in members for e, t in c.files.items()}
        out.append((with_configs(base, files, f"tiles-{k + 1}-of-{len(members)}-dispatches"),
                    members))
    return out


@dataclass(frozen=True)
class RuleSet:
    variant: Variant
    files: dict[str, str]             # {executable: edited configured source}
    functions: dict[str, str]         # {executable: its dispatch function}


# The rule-made candidates (dispatch_configs): each edits every dispatch it applies to at once,
# and is measured whole against the variant (no screening: a rule is one candidate).
RULES = {"weights-once": weights_once, "wide-accumulators": wide_accumulators,
         "two-vector-tiles": two_vector_tiles}
RULE_NOTES = {"weights-once": "RHS streamed once (all LHS rows per workgroup)",
              "wide-accumulators": "matrix-vector products with 8-vector register tiles",
              "two-vector-tiles": "matmuls with register tiles two vectors wide"}


def rule_set(rule: str, configured: list[ConfiguredDispatch], base: Variant, work: Path
             ) -> RuleSet | None:
    """One candidate for every dispatch of the module `rule` (RULES) applies to, or None
    when none qualifies. An edit IREE rejects on its own is left out."""
    files, functions = {}, {}
    for d in configured:
        levels = RULES[rule](d.root_name, d.levels, d.operand_shapes)
        text = with_levels(d.source, d.lowering_config, levels, d.levels) if levels else None
        if text is not None and compiles_alone(text, work) is None:
            files[d.executable], functions[d.executable] = text, d.function
    if not files:
        return None
    return RuleSet(with_configs(base, files, rule), files, functions)


def weights_once_set(configured: list[ConfiguredDispatch], base: Variant, work: Path
                     ) -> RuleSet | None:
    """rule_set's "weights once" (dispatch_configs.weights_once): every data-tiled matmul."""
    return rule_set("weights-once", configured, base, work)


def rule_candidates(rules: dict[str, RuleSet], rules_built: list, configured: list
                    ) -> list[tuple[Candidate, Bundle]]:
    """(candidate, the rule's build) for each dispatch each single rule edits: screened with
    the searched tiles, so a dispatch keeps whichever is fastest (MobileNetV2-like: screened
    distribution tiles of its 49-row projections beat the compiler's, two-vector tiles beat
    both). `rules_built`: (variant, bundle, note) of the rules that built."""
    by_executable = {d.executable: d for d in configured}
    return [(Candidate(r.variant, by_executable[e], {e: text}, f"{e}:{name}"), bundle)
            for name, r in rules.items() if "+" not in name
            for variant, bundle, _ in rules_built if variant == r.variant
            for e, text in r.files.items() if e in by_executable]


def with_configs(base: Variant, files: dict[str, str], label: str) -> Variant:
    """`base` with these substituted executables (stored by content digest)."""
    digest = set_digest(files)
    directory = iree.dispatch_configs_dir(digest)
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (directory / f"{name}.mlir").write_text(source)
    return Variant(base.lowering, f"{base.flag_set}+{label}",
                   (*base.flags, f"--edgekit-dispatch-configs={digest}"))


def configured_dispatches(options, base: Variant, work: Path) -> tuple[Bundle, list]:
    """The chosen variant built with IREE's configuration dump, and what the dump says."""
    # the dump's path enters the build key: a fixed one per recipe, target and variant, and
    # rebuilt in place (use_cache=False replaces the entry), so tuning again adds no entry
    where = hashlib.sha256(json.dumps([str(Path(options.recipe).resolve()), options.target,
                                       base.lowering, base.flags]).encode()).hexdigest()[:16]
    dump = iree.dispatch_configs_root().parent / "configured" / where
    shutil.rmtree(dump, ignore_errors=True)
    dumped = Variant(base.lowering, base.flag_set, (*base.flags, f"{DUMP_FLAG}{dump}"))
    result = build(BuildOptions(recipe=options.recipe, target=options.target,
                                out=work / "configured-build", use_cache=False,
                                variant=dumped, use_tuned=False))
    return result.bundle, read_configured(dump)




SCREEN_ROUNDS = 2
SCREEN_GAIN = 0.05


def search_dispatches(options, target, chosen, say) -> tuple[object, list]:
    """(the candidate builds should use, the dispatch candidates' results). `chosen` is the
    tuner's choice (a CandidateResult); it stays unless a candidate clearly beats it."""
    from edgekit.tune import tuner
    base = Variant(chosen.lowering, chosen.flag_set, chosen.flags)
    results: list = []
    with tempfile.TemporaryDirectory(prefix="edgekit-tune-dispatches-") as tmp:
        work = Path(tmp)
        say(f"reading IREE's dispatch configurations of {base.name}")
        searched = base     # the variant the edited executables come from
        try:
            dumped, configured = configured_dispatches(options, base, work)
            if any("dense_resource<" in d.source for d in configured):
                searched = Variant(base.lowering, base.flag_set,
                                   (*base.flags, NO_INLINED_CONSTANTS))
                say(f"{base.name} inlines constants its dispatch dump leaves out: searching "
                    f"with {NO_INLINED_CONSTANTS}")
                dumped, configured = configured_dispatches(options, searched, work)
        except EdgekitError as exc:
            say(f"no dispatch search: {tuner._one_line(exc)}")
            return chosen, []
        # only what a bundle may carry (dispatch-configs/<executable>.mlir): IREE's
        # `_encoding_N` executables (data tiling's packs) are left as the compiler made them
        configured = [d for d in configured if carriable(d.executable)]
        here = options.host is None and tuner.runs_here(target)
        costs = _steady_costs(dumped, work, chosen.threads) if here else \
            _device_costs(options, dumped, work, chosen.threads, say) if options.host else None
        how = ("ranked by IREE's HAL profile" + ("" if here else " on the device")
               + (f" at {chosen.threads} threads" if chosen.threads > 1 else "")) if costs \
            else "ranked by FLOPs (static)"
        # IREE's configured source of some dispatches does not compile again as printed
        # (ResNet18-like's 7x7 stem convolution: an llvm.getelementptr with a dynamic-index
        # sentinel): each executable is compiled alone first (~1 s, not a model build)
        hot = []
        for d in hot_dispatches(configured, costs, len(configured)):
            if len(hot) == options.dispatches:
                break
            problem = compiles_alone(d.source, work)
            if problem is None:
                hot.append(d)
            else:
                say(f"skipping {d.function}: its configured source does not compile again "
                    f"({problem})")
        say(f"searching tile sizes of {', '.join(d.function for d in hot) or 'no dispatch'} "
            f"({how})")
        candidates = []
        for c in candidates_for(hot, searched, options.per_dispatch):
            problem = compiles_alone(c.files[c.dispatch.executable], work)
            if problem is None:
                candidates.append(c)
            else:
                results.append(tuner._result(c.variant, chosen.threads, "build-failed",
                                             f"IREE rejects these tiles: {problem}"))

        def build_one(variant: Variant, i: int) -> Bundle | None:
            say(f"building {variant.name}")
            try:
                return build(BuildOptions(recipe=options.recipe, target=options.target,
                                          out=work / f"candidate-{i}", variant=variant,
                                          use_cache=options.use_cache)).bundle
            except EdgekitError as exc:
                results.append(tuner._result(variant, chosen.threads, "build-failed",
                                             tuner._one_line(exc)))
                return None

        rules = {name: r for name in RULES if (r := rule_set(name, configured, searched, work))}
        for name, r in rules.items():
            say(f"{name}: {RULE_NOTES[name]} in {len(r.files)} dispatch(es)")
        base_bundle = build_one(base, 0)
        if base_bundle is None:
            return chosen, []
        rules_built = []
        if len(rules) > 1:       # the rules edit different dispatches: also all of them at once
            rules["+".join(rules)] = RuleSet(
                with_configs(searched, {k: v for r in rules.values() for k, v in r.files.items()},
                             "+".join(rules)),
                {k: v for r in rules.values() for k, v in r.files.items()},
                {k: v for r in rules.values() for k, v in r.functions.items()})
        for j, (name, r) in enumerate(rules.items()):
            if (b := build_one(r.variant, len(candidates) + 10 + j)) is not None:
                rules_built.append((r.variant, b, "; ".join(
                    RULE_NOTES[n] for n in name.split("+")) + " in "
                    + ", ".join(r.functions.values())))
        # every rule's edits together (what a winner does not edit goes with the winners)
        rule_files = {k: v for name, r in rules.items() if "+" not in name
                      for k, v in r.files.items()}
        rule_functions = {k: v for name, r in rules.items() if "+" not in name
                          for k, v in r.functions.items()}
        # the dispatches' own times are screened against the module they were edited from
        screen_base = base_bundle if searched is base or not (here and costs) else \
            build_one(searched, len(candidates) + 2)
        # the k-th tiles of every hot dispatch share one build: each dispatch is its own
        # executable, so the edits do not meet, and the HAL profile times each dispatch alone
        shared = [(variant, members, build_one(variant, i)) for i, (variant, members)
                  in enumerate(shared_builds(candidates, searched), start=1)]
        built = [(c, bundle) for _, members, bundle in shared if bundle is not None
                 for c in members]
        built += rule_candidates(rules, rules_built, configured)
        if here and costs and screen_base is not None:
            winners, notes = screen(screen_base, built, work, chosen.threads, say)
            results += [tuner._result(c.variant, chosen.threads, "screened-out", notes[c.label])
                        for c, _ in built if c not in winners]
            to_measure = []
            if winners:
                files = {k: v for c in winners for k, v in c.files.items()}
                # one winner: its own label; more: a count (the notes list each one, and a
                # label of every winner's tiles outgrew a file name at six)
                label = winners[0].label if len(winners) == 1 else \
                    f"best-tiles-of-{len(winners)}-dispatches"
                variant = with_configs(searched, files, label)
                bundle = build_one(variant, len(candidates) + 1)
                if bundle is not None:
                    to_measure.append((variant, bundle, "; ".join(notes[c.label]
                                                                  for c in winners)))
                if set(rule_files) - set(files):
                    # the rules' edits of the dispatches no winner edits, with the winners
                    variant = with_configs(searched, {**rule_files, **files},
                                           f"{label}+rules")
                    bundle = build_one(variant, len(candidates) + 4)
                    if bundle is not None:
                        to_measure.append((variant, bundle, "the winners and the rules' edits "
                                           "of " + ", ".join(
                                               f for e, f in rule_functions.items()
                                               if e not in files)))
        else:
            # each shared build measured whole; how its dispatches were picked (and what they
            # cost there), for the record
            def picked(c: Candidate) -> str:
                ms = _dispatch_total(costs, c.dispatch.function) if costs else None
                return c.dispatch.function + ("" if ms is None else
                                              f" {_rate(c.dispatch.function, ms, costs.calls)}")
            to_measure = [(variant, bundle, f"{how}: " + "; ".join(map(picked, members)))
                          for variant, members, bundle in shared if bundle is not None]
        to_measure += rules_built
        if not to_measure:
            return chosen, results
        # decided here, while the builds exist: a near miss is measured again on them
        kept, tried = tuner.refined(options, target, chosen, (base, base_bundle), to_measure,
                                    say)
        return kept, results + tried


def carriable(executable: str) -> bool:
    """A bundle may hold this executable's configuration (models/bundle.py's payload names,
    which the device's verify.sh checks too)."""
    try:
        check_payload_name(f"{DISPATCH_CONFIGS}/{executable}.mlir")
    except ValueError:
        return False
    return True


def compiles_alone(source: str, work: Path) -> str | None:
    """None when a configured executable compiles on its own, else IREE's first error line."""
    path = work / "alone.mlir"
    path.write_text(source)
    try:
        iree.compile_module(path, work / "alone.so", ("--compile-mode=hal-executable",))
    except iree.CompileFailure as failure:
        lines = [ln.strip() for ln in failure.diagnostics.splitlines() if "error" in ln]
        return (lines or ["does not compile"])[0][:200]
    return None


def _steady_costs(bundle: Bundle, work: Path, threads: int, runs: int = SCREEN_ROUNDS
                  ) -> Costs | None:
    """Per dispatch, the least of `runs` HAL profiles (one profile on a loaded machine ranked
    ResNet18-like's strided convolutions below matmuls 2-3x cheaper)."""
    profiles = [p for _ in range(runs) if (p := _profile_or_none(bundle, work, threads))]
    if not profiles:
        return None
    return Costs({k: min(p.get(k, float("inf")) for p in profiles) for k in profiles[0]},
                 calls=profiles[0].calls)


def _device_costs(options, bundle: Bundle, work: Path, threads: int, say
                  ) -> Costs | None:
    """profile_ms on the device (`--host`): the configured build uploaded as a trial release,
    validated, profiled there by its own iree-benchmark-module, the trace read here. None
    (ranked by FLOPs instead, as the progress line says) when any of it fails."""
    from edgekit.device.trial import trial_on_device
    try:
        with trial_on_device(options.host, options.identity, [bundle], say) as trial:
            if trial.problems[0] is not None:
                return None
            say("profiling the dispatches on the device (IREE's HAL profiler)")
            run, trace = trial.profile(bundle, 5, work, threads)
            return costs_of(run, dispatch_groups(trace))
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, EdgekitError) as exc:
        say(f"no HAL profile on the device: {str(exc).splitlines()[0][:200] if str(exc) else exc}")
        return None


def _profile_or_none(bundle: Bundle, work: Path, threads: int) -> Costs | None:
    try:
        return profile_ms(bundle, work, threads)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, EdgekitError):
        return None      # ranked by FLOPs instead (the progress line says so)


def screen(base: Bundle, built: list, work: Path, threads: int, say
           ) -> tuple[list[Candidate], dict[str, str]]:
    """(per dispatch, the candidate whose own dispatch time beats the compiler's tiles by
    SCREEN_GAIN, if any; a note per candidate). Times: best of SCREEN_ROUNDS interleaved
    HAL profiles, ms per inference of that dispatch at its fastest call."""
    best: dict[str, float] = {}
    times: dict[str, float] = {}
    calls: dict[str, float] = {}
    for r in range(SCREEN_ROUNDS):
        say(f"screening tile sizes by the HAL profile (round {r + 1}/{SCREEN_ROUNDS})")
        base_costs = _profile_or_none(base, work, threads) or Costs()
        calls.update(base_costs.calls)
        for d in {c.dispatch.function for c, _ in built}:
            ms = _dispatch_total(base_costs, d)
            if ms is not None:
                best[d] = min(best.get(d, ms), ms)
        profiles: dict[str, dict[str, float]] = {}      # one profile per shared build
        for c, bundle in built:
            key = str(bundle.path)
            if key not in profiles:
                profiles[key] = _profile_or_none(bundle, work, threads) or {}
            ms = _dispatch_total(profiles[key], c.dispatch.function)
            if ms is not None:
                times[c.label] = min(times.get(c.label, ms), ms)
    winners: dict[str, Candidate] = {}
    notes = {}
    for c, _ in built:
        was, now = best.get(c.dispatch.function), times.get(c.label)
        if was is None or now is None:
            notes[c.label] = f"{c.label}: not in the HAL profile"
            continue
        notes[c.label] = f"{c.dispatch.function}: {_rate(c.dispatch.function, was, calls)} → " \
                         f"{_rate(c.dispatch.function, now, calls)} (HAL profile" + \
                         (f", {threads} threads)" if threads > 1 else ")")
        held = winners.get(c.dispatch.executable)
        if now < was * (1 - SCREEN_GAIN) and (held is None or now < times[held.label]):
            winners[c.dispatch.executable] = c
    return list(winners.values()), notes


def _dispatch_total(by_key: dict[str, float], function: str) -> float | None:
    """The sum over the profile keys of `function` (its ms, or its calls), None if absent."""
    found = [v for key, v in by_key.items() if key.startswith(function)]
    return sum(found) if found else None


def _rate(function: str, ms: float, calls_of: dict[str, float]) -> str:
    """`ms` per inference, and the GFLOP/s of its calls (a dispatch may run several times;
    `calls_of`: calls per inference by dispatch, as Costs.calls)."""
    calls = _dispatch_total(calls_of, function) or 1.0
    flops = (flop_count(function) or 0) * calls
    per_call = f", {calls:g} calls" if calls != 1 else ""
    return f"{ms:.3f} ms{per_call}" + (f" ({flops / ms / 1e6:.0f} GFLOP/s)" if flops else "")
