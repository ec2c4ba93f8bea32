"""`edgekit bisect`: when a build's outputs are wrong on a device, find where they go wrong.

Level 1 makes every submodule's output an extra output of the model (taps.py), builds that
variant exactly as the recipe builds the model (quantization, lowering, flags, target), runs it
where the build fails (this machine with `local`, or a device over SSH: uploaded, validated,
never activated, removed) and compares each tap with the host reference (eager PyTorch). Level 2
repeats that for every op of the first module that left tolerance. The first op that leaves
tolerance is then built alone, with its real input values, into a reproducer bundle that is run
the same way and kept with a reproduce.sh.

Measured here (2 shared cores, llvm-cpu host target, cache cold): see README "When validation
fails"."""

from __future__ import annotations

import dataclasses
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.api.build import recorded_steering
from edgekit.bisect import taps as T
from edgekit.bisect.from_bundle import HINT, recover
from edgekit.bisect.profile import Level, TapResult, profile
from edgekit.bisect.variant import (Built, build_variant, copy_bundle, run_here, run_on_device)
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.errors import ConfigError
from edgekit.models.bundle import load_bundle
from edgekit.pipeline.build import Variant
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.validate.tolerance import with_build_defaults


@dataclass(frozen=True)
class BisectOptions:
    recipe: Path | None
    target: str | None
    host: str | None = None         # run on this device (user@host[:port] or a lab name)
    local: bool = False             # run on this machine instead
    identity: Path | None = None
    out: Path | None = None         # reproducer directory [default: build/<app>-<target>.bisect]
    trust_pickle: bool = False
    bundle: Path | None = None      # bisect what this bundle was built from (its manifest)
    use_tuned: bool = True          # apply `edgekit tune`'s recorded choice, as the build does


@dataclass(frozen=True)
class Reproducer:
    directory: Path
    script: Path
    reproduced: bool                # the op alone leaves tolerance the same way
    check: TapResult


@dataclass(frozen=True)
class BisectResult:
    app: str
    target: str
    where: str                      # "this machine" or the device's address
    quantization: str | None        # the build's mode (int8, fp16, …) or None
    levels: tuple[Level, ...]
    first: TapResult | None         # the first tap (finest level) that left tolerance
    reproducer: Reproducer | None = None
    notes: tuple[str, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def diverges(self) -> bool:
        return self.first is not None


def bisect(options: BisectOptions, say: Callable[[str], None] = lambda _: None,
           html: Path | None = None) -> BisectResult:
    """Bisect; with `html`, also write the error profile there as an HTML report."""
    result = _bisect_either(options, say)
    if html:
        from edgekit.report.bisect_html import render_bisect
        html.write_text(render_bisect(f"edgekit bisect: {result.app} for {result.target}",
                                      summary(result), _html_levels(result)))
    return result


def _bisect_either(options: BisectOptions, say: Callable[[str], None]) -> BisectResult:
    if bool(options.host) == bool(options.local):
        raise ConfigError("say where the build fails: --host DEVICE or --local", key="host",
                          hint="edgekit bisect --recipe R --target T --host user@addr")
    if bool(options.bundle) == bool(options.recipe and options.target):
        raise ConfigError("say what to bisect: --bundle B, or --recipe R with --target T",
                          key="bundle", hint="edgekit bisect --bundle build/app-T --local")
    if options.bundle:
        with tempfile.TemporaryDirectory(prefix="edgekit-bisect-bundle-") as workdir, \
                load_bundle(options.bundle) as opened:
            recovered = recover(opened, Path(workdir))
            return _bisect(dataclasses.replace(options, recipe=recovered.recipe,
                                               target=recovered.target, use_tuned=False),
                           say, recovered.model_digest, options.bundle)
    return _bisect(options, say)


def _bisect(options: BisectOptions, say: Callable[[str], None], digest: str | None = None,
            bundle: Path | None = None) -> BisectResult:
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    recipe = load_recipe(options.recipe)
    if options.trust_pickle:
        recipe = recipe.trusting_pickle()
    target = load_target(options.target)
    say("exporting")
    frontend = frontend_for(recipe.model)
    loaded = frontend.load(recipe)
    exported = frontend.export(recipe, loaded)
    if digest is not None and exported.digest != digest:
        raise ConfigError(f"the model at {recipe.source} is not the one the bundle was built "
                          f"from (digest {exported.digest[:12]}…, the bundle's {digest[:12]}…)",
                          where=str(bundle), hint=HINT)
    notes: list[str] = []
    tuning = recorded_steering(exported.digest, target).tuning if options.use_tuned else None
    if tuning is not None and recipe.lowering == "auto":
        # the variant `edgekit tune` chose is what `edgekit build` (and deploy) would use
        recipe = Variant(tuning.lowering, tuning.flag_set, tuning.flags).applied_to(recipe)
        notes.append(f"built with the tuned variant {tuning.variant} (as `edgekit build` "
                     "would; --no-tuned: the profile's default)")
    if frontend.kind == "onnx":
        from edgekit.bisect.onnx_taps import OnnxGraph
        graph = OnnxGraph(recipe, loaded)
    else:
        graph = T.TorchGraph(exported.program, loaded.samples, loaded.input_names)
    mode = recipe.quantize.mode if recipe.quantize else None
    tolerances = with_build_defaults(recipe.validation, mode)
    where = "this machine" if options.local else options.host
    mark = time.perf_counter()
    seconds["export"] = round(mark - started, 2)

    def run(level: str, taps: list[T.Tap]) -> Level:
        nonlocal where, mark
        built = build_variant(recipe, target, graph.exported(taps), level, say)
        now = time.perf_counter()
        seconds[f"{level}: build"] = round(now - mark, 2)
        say(f"{level}: running {len(taps)} taps on {where}")
        where, actual = _run(built, options, say)
        mark = time.perf_counter()
        seconds[f"{level}: run"] = round(mark - now, 2)
        quantized = built.quantization
        return profile(level, taps, actual, built.reference, tolerances,
                       built.fp32 if quantized else None,
                       # PT2E folds a batch norm into the convolution before it
                       folded_norms=frontend.kind == "pytorch" and quantized is not None
                       and quantized.mode in ("int8", "int8-weights"))

    boundary = graph.boundary_taps()
    levels = [run("module boundaries", boundary)]
    first = levels[0].first_failing
    if first is not None and not levels[0].outputs_fail:
        # the outputs validate: differences inside that never reach them are rounding (an
        # fp16 build's wider activations), not the failure bisect looks for
        row = levels[0].rows[first]
        beyond = sum(not r.check.ok for r in levels[0].rows)
        notes.append(f"every output is within tolerance; {beyond} intermediate tap(s) are not "
                     f"(first: {row.tap.op} in '{row.tap.module or '(model)'}', max abs error "
                     f"{row.check.max_abs_error:.3g}): differences that do not reach the "
                     "outputs")
        first = None
    found: TapResult | None = levels[0].rows[first] if first is not None else None
    if found is not None:
        after = boundary[first - 1].node if first > 0 else None
        ops = graph.op_taps(after, boundary[first].node)
        if len(ops) > 1:
            label = f"ops of {found.tap.module or '(model)'}"
            finer = run(label, ops)
            levels.append(finer)
            if finer.first_failing is not None:
                found = finer.rows[finer.first_failing]
            else:
                notes.append(f"each op of {found.tap.module or 'the model'} alone agrees: "
                             "the error needs them compiled together (fused)")
    reproducer = None
    if found is not None and recipe.quantize is None:
        reproducer = _reproducer(recipe, target, graph, found, options, tolerances, say)
        seconds["reproducer"] = round(time.perf_counter() - mark, 2)
    elif found is not None:
        notes.append(f"no reproducer for a {mode} build: the op alone is not quantized the "
                     "way it is inside the model")
    seconds["total"] = round(time.perf_counter() - started, 2)
    return BisectResult(app=recipe.name, target=target.name, where=where, quantization=mode,
                        levels=tuple(levels), first=found, reproducer=reproducer,
                        notes=tuple(notes), seconds=seconds)


def _run(built: Built, options: BisectOptions, say: Callable[[str], None]
         ) -> tuple[str, list[np.ndarray]]:
    if options.local:
        return "this machine", run_here(built.bundle)
    address, outputs = run_on_device([built.bundle], options.host, options.identity, say)
    return (options.host if options.host == address else f"{options.host} ({address})",
            outputs[0])


def _reproducer(recipe, target, graph, found: TapResult, options: BisectOptions, tolerances,
                say: Callable[[str], None]) -> Reproducer:
    """The failing op alone, fed the values its operands have in the model on the golden
    sample, built for the same target; run where the model ran, kept with a reproduce.sh."""
    built = build_variant(recipe, target, graph.reproducer(found.tap),
                          f"reproducer {found.tap.op}", say)
    where, actual = _run(built, options, say)
    check = profile("reproducer", [found.tap], actual[:1], built.reference, tolerances).rows[0]
    directory = (options.out or Path("build") / f"{recipe.name}-{target.name}.bisect").resolve()
    directory.mkdir(parents=True, exist_ok=True)
    copy_bundle(built.bundle, directory / "bundle")
    script = directory / "reproduce.sh"
    script.write_text(_script(found, recipe.name, target.name, where, check, options))
    script.chmod(0o755)
    return Reproducer(directory, script, reproduced=not check.check.ok, check=check)


def _script(found: TapResult, app: str, target: str, where: str, check: TapResult,
            options: BisectOptions) -> str:
    tap = found.tap
    host = shlex.quote(options.host) if options.host else ""
    said = "; ".join(check.check.problems) or "it agreed alone"
    return f"""#!/bin/sh
# {tap.op} of module '{tap.module or "(model)"}' ({tap.module_type}) of {app}, built for {target},
# alone: its operands hold the values they have inside the model on the golden sample.
# On {where}: {said}
# Usage: reproduce.sh            run it on this machine (edgekit validate --local)
#        reproduce.sh HOST       deploy it to HOST: validation there refuses a wrong module
#                                (exit 8) and never activates it
set -e
here=$(cd "$(dirname "$0")" && pwd)
host=${{1:-{host}}}
if [ -z "$host" ]; then
    exec edgekit validate "$here/bundle" --local
fi
exec edgekit deploy "$here/bundle" --host "$host"
"""


def where_of(row: TapResult) -> str:
    """The op, its module and the module's type: where a tap is."""
    return f"{row.tap.op} in '{row.tap.module or '(model)'}' ({row.tap.module_type})"


def summary(result: BisectResult) -> list[str]:
    """The verdict, the reproducer, the notes and the time taken: a line each."""
    lines = []
    if result.first is None:
        every = all(r.check.ok for level in result.levels for r in level.rows)
        lines.append(f"no divergence: {'every tap agrees' if every else 'the outputs agree'} "
                     f"with the reference on {result.where}")
    else:
        c = result.first.check
        cos = f"{c.cosine:.6f}" if c.cosine is not None else "undefined"
        lines.append(f"first divergence: {where_of(result.first)}: max abs error "
                     f"{c.max_abs_error:.3g}, cosine {cos} ({'; '.join(c.problems)})")
    if result.reproducer:
        r = result.reproducer
        alone = "fails the same way" if r.reproduced else "agrees: it fails only inside the model"
        lines.append(f"reproducer: {r.script} (the op alone {alone})")
    lines.extend(result.notes)
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items() if k != "total")
    lines.append(f"took {result.seconds.get('total', 0):.1f} s ({steps})")
    return lines


def _html_levels(result: BisectResult):
    from edgekit.report.bisect_html import ProfileRow
    return [(level.name, [ProfileRow(r.tap.module, r.tap.op, r.check.max_abs_error,
                                     r.check.cosine, r.check.ok,
                                     r.fp32.max_abs_error if r.fp32 else None)
                          for r in level.rows]) for level in result.levels]
