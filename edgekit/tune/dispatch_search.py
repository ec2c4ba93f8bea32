"""`edgekit tune --dispatches N`: after the lowering × flag set × threads choice, search tile
sizes for the N dispatches that cost the most, starting from what the compiler chose.

1. Build the chosen variant once more with IREE's configuration dump
   (toolchain/iree_configs.py: each dispatch's root op and its tile sizes).
2. Rank the dispatches: on this machine by IREE's HAL profiler (iree-benchmark-module
   `--device_profiling_mode=host-execution`, read by `iree-profile dispatch`, as
   bench/dispatch_profile.py); for a target measured on a device, by the FLOPs IREE's
   dispatch names give (no profiler run there yet: the ranking is static, and said so).
3. For each, a few tile sizes around the compiler's (tune/dispatch_configs.py), each a
   candidate module: the variant's flags + `--edgekit-dispatch-configs=<sha256>` (the edited
   executable, kept by content digest under $EDGEKIT_HOME/tuning/dispatch-configs/; the
   digest enters the build key, the tuning record and the manifest's TuningNote).
4. Measure the candidates with the chosen variant as the tuner measures (validated,
   interleaved rounds, same thread count) and keep one only if it clearly beats the variant
   round by round (tuner.clearly_faster).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.models.bundle import Bundle
from edgekit.pipeline.build import BuildOptions, Variant, build
from edgekit.toolchain import iree
from edgekit.toolchain.iree_configs import ConfiguredDispatch, read_configured
from edgekit.tune.dispatch_configs import candidate_levels, set_digest, with_levels

_SHAPED = re.compile(r"_(conv|matmul_like|batch_matmul|matmul)_((?:\d+x)+\d+)_f")
DUMP_FLAG = "--iree-hal-dump-executable-configurations-to="


def flop_count(name: str) -> float | None:
    """2·∏dims of IREE's conv/matmul dispatch names (see bench/dispatch_profile.py)."""
    m = _SHAPED.search(name)
    return 2.0 * math.prod(int(d) for d in m.group(2).split("x")) if m else None


def profile_ms(bundle: Bundle, work: Path, iterations: int = 5) -> dict[str, float]:
    """{dispatch function: ms per inference} from IREE's HAL profiler (local-sync, 1 thread)."""
    m = bundle.manifest
    trace = work / "run.ireeprof"
    out = subprocess.run(
        [iree.tool_path("iree-benchmark-module"), f"--module={bundle.module}",
         "--device=local-sync", f"--function={m.entry_function}",
         *[f"--input=@{bundle.file(p)}" for p in m.golden_inputs],
         f"--benchmark_min_time={iterations}x", "--benchmark_format=json",
         "--device_profiling_mode=host-execution,executable-metadata",
         f"--device_profiling_output={trace}"],
        check=True, capture_output=True, text=True, timeout=1800).stdout
    runs = json.loads(out)["benchmarks"][0]["iterations"]
    groups = subprocess.run([iree.tool_path("iree-profile"), "dispatch", "--format=jsonl",
                             str(trace)], check=True, capture_output=True, text=True,
                            timeout=600).stdout
    costs: dict[str, float] = {}
    for line in groups.splitlines():
        g = json.loads(line)
        if g.get("type") == "host_dispatch_group":
            costs[g["key"]] = costs.get(g["key"], 0.0) + g["total_ns"] / 1e6 / runs
    return costs


def hot_dispatches(configured: list[ConfiguredDispatch], costs: dict[str, float] | None,
                   top: int) -> list[ConfiguredDispatch]:
    """The `top` configured dispatches that cost the most (by measured ms, else by FLOPs)."""
    def cost(d: ConfiguredDispatch) -> float:
        if costs is not None:
            return max((ms for key, ms in costs.items() if key.startswith(d.function)),
                       default=0.0)
        return flop_count(d.function) or 0.0
    ranked = sorted(configured, key=cost, reverse=True)
    return [d for d in ranked if cost(d) > 0][:top]


def candidates_for(hot: list[ConfiguredDispatch], base: Variant, per_dispatch: int
                   ) -> list[Variant]:
    """One candidate variant per (dispatch, tile sizes); its edited executable is kept as
    `<digest>/<executable>.mlir` in the store of dispatch configurations."""
    variants = []
    for d in hot:
        for levels in candidate_levels(d.levels, limit=per_dispatch):
            text = with_levels(d.source, d.lowering_config, levels)
            if text is None:
                continue
            files = {d.executable: text}
            digest = set_digest(files)
            directory = iree.dispatch_configs_dir(digest)
            directory.mkdir(parents=True, exist_ok=True)
            for name, source in files.items():
                (directory / f"{name}.mlir").write_text(source)
            changed = "+".join(f"{name}={'x'.join(map(str, sizes))}"
                               for (name, sizes), (_, was) in zip(levels, d.levels)
                               if sizes != was)
            variants.append(Variant(base.lowering, f"{base.flag_set}+{d.executable}:{changed}",
                                    (*base.flags, f"--edgekit-dispatch-configs={digest}")))
    return variants


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




def search_dispatches(options, target, chosen, say) -> tuple[object, list]:
    """(the candidate builds should use, the dispatch candidates' results). `chosen` is the
    tuner's choice (a CandidateResult); it stays unless a candidate clearly beats it."""
    from edgekit.tune import tuner
    base = Variant(chosen.lowering, chosen.flag_set, chosen.flags)
    threads = (chosen.threads,)
    with tempfile.TemporaryDirectory(prefix="edgekit-tune-dispatches-") as tmp:
        work = Path(tmp)
        say(f"reading IREE's dispatch configurations of {base.name}")
        try:
            dumped, configured = configured_dispatches(options, base, work)
        except EdgekitError as exc:
            say(f"no dispatch search: {tuner._one_line(exc)}")
            return chosen, []
        measure_here = options.host is None and tuner.runs_here(target)
        costs, how = None, "ranked by FLOPs (static)"
        if measure_here:
            try:
                costs = profile_ms(dumped, work)
                how = "ranked by IREE's HAL profile"
            except (subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
                how = f"ranked by FLOPs (the HAL profile failed: {str(exc)[:120]})"
        hot = hot_dispatches(configured, costs, options.dispatches)
        say(f"searching tile sizes of {', '.join(d.function for d in hot) or 'no dispatch'} "
            f"({how})")
        variants = candidates_for(hot, base, options.per_dispatch)
        built: list[tuple[Variant, Bundle]] = []
        results = []
        for i, variant in enumerate([base, *variants]):
            say(f"building {variant.name} ({i + 1}/{len(variants) + 1})")
            try:
                bundle = build(BuildOptions(recipe=options.recipe, target=options.target,
                                            out=work / f"candidate-{i}", variant=variant,
                                            use_cache=options.use_cache)).bundle
            except EdgekitError as exc:
                if variant is base:
                    return chosen, []
                results.append(tuner._result(variant, chosen.threads, "build-failed",
                                             tuner._one_line(exc)))
                continue
            built.append((variant, bundle))
        if len(built) < 2:
            return chosen, results
        measured = tuner.measure(options, target, built, threads, say)
    again = next((r for r in measured if r.variant == base.name), None)
    tried = [r for r in measured if r.variant != base.name]
    valid = [r for r in tried if r.status == "ok"]
    results += tried
    if again is None or again.status != "ok" or not valid:
        return chosen, results
    best = min(valid, key=lambda r: r.p50_ms)
    if tuner.clearly_faster(best, again):
        return best, results
    return chosen, results
