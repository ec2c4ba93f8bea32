"""`edgekit build`: recipe + target profile → bundle, through ONE checked plan per target.

The plan (`plan_for`): FRONT (load → export → quantize → check golden, by the recipe's
frontend), "build key" (the steering, a tuned variant, the key), "cache" (a hit ends the plan
there), BACK (rewrite → import → lower+compile → check quantization → compile variants →
package: nearly all the time) and "store". An NPU family (pipeline/npu/registry.py) edits it
by stage name: its own quantizer, its compiler's stages, packaging without a module. BACK reads
no recipe: torch.compile graphs (compile/backend.py) go through it and through the same key.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from edgekit.config.recipe import Recipe
from edgekit.config.profiles import Target, load_target
from edgekit.config.edgekit_flags import PREFIX, parse_edgekit_flags
from edgekit.errors import BundleError
from edgekit.models.bundle import MANIFEST, Bundle, load_bundle, sha256_file
# the options and results live in a torch-free module (a source-keyed hit imports no toolchain);
# re-exported here, where callers have always found them
from edgekit.pipeline.build_types import (BuildOptions, BuildResult, Steer, Steering,  # noqa: F401
                                          Variant, default_out)
from edgekit.pipeline.build_run import BackContext, BuildRun, Stored
from edgekit.pipeline.cache import BuildCache, cache_key
from edgekit.pipeline.hit import _publish, _write_tar, cache_slot
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.load import LoadedModel
from edgekit.pipeline.lower import (CompiledModule, ImportedModule, check_quantized,
                                    compile_variants, import_module, lower_and_compile)
from edgekit.pipeline.npu.registry import family_for
from edgekit.pipeline.package import BundleIdentity, package_bundle
from edgekit.pipeline import source_key
from edgekit.pipeline.dataset import attach_dataset, dataset_digests
from edgekit.pipeline.stages import Stage, check_plan, edit_plan, run_plan
from edgekit.toolchain import dispatch_sets
from edgekit.toolchain.runner import keep_temps
from edgekit.toolchain.versions import edgekit_code_digest, toolchain_versions
from edgekit.validate.golden import check_golden
from edgekit.validate.tolerance import with_build_defaults

# The context of the FRONT stages is the recipe; its frontend comes from the recipe's `model:`
# and travels on in the values (LoadedModel.frontend, ExportedModel.frontend).
LOAD: Stage[Recipe] = Stage("load", Recipe, LoadedModel,
                            lambda recipe, _: frontend_for(recipe.model).load(recipe))
EXPORT: Stage[Recipe] = Stage("export", LoadedModel, ExportedModel,
                              lambda recipe, loaded: loaded.frontend.export(recipe, loaded))
FRONT: tuple[Stage[Recipe], ...] = (
    LOAD,
    EXPORT,
    Stage("quantize", ExportedModel, ExportedModel,
          lambda recipe, exported: exported.frontend.quantize(recipe, exported)),
    Stage("check golden", ExportedModel, ExportedModel,
          lambda recipe, exported: refuse_uninformative(recipe, exported)),
)
BACK: tuple[Stage[BackContext], ...] = (
    Stage("rewrite", ExportedModel, ExportedModel,
          lambda ctx, exported: exported.frontend.rewrite(exported,
                                                          rewrite_flags(ctx, exported))),
    Stage("import", ExportedModel, ImportedModule,
          lambda ctx, exported: import_module(exported, ctx.reproducer_dir)),
    Stage("lower+compile", ImportedModule, CompiledModule,
          lambda ctx, imported: lower_and_compile(imported, ctx.target, ctx.lowering,
                                                  ctx.flags, ctx.workdir,
                                                  ctx.reproducer_dir, ctx.first_lowering)),
    Stage("check quantization", CompiledModule, CompiledModule,
          lambda ctx, compiled: check_quantized(compiled, ctx.target)),
    Stage("compile variants", CompiledModule, CompiledModule,
          lambda ctx, compiled: compile_variants(compiled, ctx.target, ctx.workdir)),
    Stage("package", CompiledModule, Bundle,
          lambda ctx, compiled: package_bundle(
              compiled, ctx.identity(compiled.quantization), ctx.target, ctx.bundle_dir)),
)


def rewrite_flags(ctx: BackContext, exported: ExportedModel) -> tuple[str, ...]:
    """The recipe's (or tuned) flags after the profile's `--edgekit-…` ones for the model's
    quantization mode (rpi5's int8: `--edgekit-int8-convs-as-matmul=on`)."""
    mode = exported.quantization.mode if exported.quantization else None
    own = tuple(f for f in ctx.target.quantize_flags.get(mode, ()) if f.startswith(PREFIX)) \
        if mode else ()
    if U8 in own and (not vnni(ctx.target) or ctx.lowering not in ("auto", "torch")):
        # the u8 form is for x86's u8 × s8 VNNI (`host` on a machine without it: the s8 form),
        # through the torch lowering (IREE's inner-tiled path that it adds fails on tosa's
        # batch matmuls: an int8 model asked through tosa is then refused for its float
        # contractions, not for that)
        own = tuple(f"{PREFIX}int8-convs-as-matmul=on" if f == U8 else f for f in own)
    return (*own, *ctx.flags)


U8 = f"{PREFIX}int8-convs-as-matmul=u8"


def vnni(target: Target) -> bool:
    """Whether the target's CPU has AVX-512 VNNI (`host`: this machine's, from
    /proc/cpuinfo; otherwise the profile's CPU features)."""
    cpu = target.cpu
    if cpu is None:
        return False
    if cpu.cpu == "host" and cpu.triple is None:
        try:
            info = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
        flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), [])
        return "avx512_vnni" in flags
    return "+avx512vnni" in cpu.features.split(",")


check_plan(FRONT, Recipe, ExportedModel)
check_plan(BACK, ExportedModel, Bundle)


def _front(run: BuildRun) -> Recipe:
    return run.recipe


def _export(run: BuildRun, loaded: LoadedModel) -> ExportedModel:
    run.float_model = EXPORT.run(run.recipe, loaded)
    return run.float_model


def _lookup(run: BuildRun, exported: ExportedModel) -> ExportedModel | Stored:
    cache = BuildCache()
    entry = cache.lookup(cache_slot(cache, run.key)) if run.options.use_cache else None
    return exported if entry is None else Stored(entry, cached=True)


def _store(run: BuildRun, bundle: Bundle) -> Stored:
    cache = BuildCache()
    return Stored(cache.store(cache_slot(cache, run.key), bundle.path,
                              replace=not run.options.use_cache), cached=False)


# The CPU path's whole plan, recipe → cache entry, in one context (BuildRun): FRONT, the key,
# the cache (a hit finishes the plan), BACK, the store. A target's NPU family edits it.
PLAN: tuple[Stage[BuildRun], ...] = (
    LOAD.within(_front),
    Stage("export", LoadedModel, ExportedModel, _export),
    *(stage.within(_front) for stage in FRONT if stage not in (LOAD, EXPORT)),
    Stage("build key", ExportedModel, ExportedModel, lambda run, m: _key(run, m)),
    Stage("cache", ExportedModel, ExportedModel, _lookup, finishes=Stored),
    *(stage.within(BuildRun.back_context) for stage in BACK),
    Stage("dataset", Bundle, Bundle,
          lambda run, bundle: attach_dataset(run.recipe, bundle, run.float_model, run.built)),
    Stage("store", Bundle, Stored, _store),
)
check_plan(PLAN, Recipe, Stored)


def plan_for(target: Target) -> tuple[Stage[BuildRun], ...]:
    """The checked plan of a build for `target`: the CPU path's, edited by the target's NPU
    family (none: as it is)."""
    family = family_for(target)
    plan = edit_plan(PLAN, family.plan_edits(target)) if family is not None else PLAN
    check_plan(plan, Recipe, Stored)
    return plan


def refuse_uninformative(recipe: Recipe, exported: ExportedModel) -> ExportedModel:
    """Before anything compiles: refuse golden outputs that cannot tell a right module from a
    wrong one (validate/golden.py), unless the recipe accepts them. Held to the tolerances the
    bundle will carry (a quantized build's own), over every validation sample (an output that
    is the same for all of them, while their inputs differ, is refused too)."""
    note = exported.quantization
    check_golden(with_build_defaults(recipe.validation, note.mode if note else None,
                                     note.reference_spread if note else ()),
                 [o.name for o in exported.outputs], [exported.golden, *exported.more_golden],
                 [exported.samples, *exported.more_samples], where=str(recipe.path))
    return exported


def build(options: BuildOptions, on_stage: Callable[[str], None] | None = None) -> BuildResult:
    """Build (or fetch from the cache) the bundle for a recipe and target profile."""
    started = time.perf_counter()
    base = source_key.loaded_recipe(options)
    recipe = with_quantize_mode(base, options.quantize)
    target = load_target(options.target)
    family = family_for(target)
    npu_versions = family.versions() if family else {}   # before anything runs: exit 5
    plan = plan_for(target)
    skey = source_key.source_key(options, base, target)
    out = (options.out or default_out(recipe, target)).resolve()
    timings: dict[str, float] = {}
    workdir = BuildCache().workdir()   # on the cache's filesystem: the bundle moves in
    run = BuildRun(options, recipe, target, workdir, out, npu_versions, source_key.Recording())
    try:
        stored = run_plan(plan, run, recipe, timings, on_stage)
        if skey is not None and run.steering.read_from is not None:
            _remember_sources(skey, run.key, run.tuning, recipe, run.float_model.digest,
                              run.sources_read, run.steering.read_from, timings)
        if options.private:
            out = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")) / out.name
        bundle = _publish(stored.entry, out, run.tuning, stored.cached, run.key)  # verified once
    finally:
        run.recording.stop()
        if not keep_temps():
            shutil.rmtree(workdir, ignore_errors=True)
    tar = _write_tar(out) if options.tar else None
    return BuildResult(bundle=bundle, cached=stored.cached,
                       seconds=time.perf_counter() - started, stage_seconds=timings, tar=tar)


def _key(run: BuildRun, exported: ExportedModel) -> ExportedModel:
    """Stage "build key": what steers the build (the files it was read from end the sources
    the record keeps), the tuned variant, the key, and the BACK stages' context."""
    options, recipe, out = run.options, run.recipe, run.out
    run.steering = steering = options.steer(exported.digest, run.target) if options.steer \
        else Steering(read_from=())
    # the build's own scratch files (an NPU venv's outputs) are no source of the model
    run.sources_read = {f for f in run.recording.stop()
                        if not Path(f).is_relative_to(run.workdir.resolve())}
    variant = options.variant
    if variant is None and options.use_tuned and recipe.lowering == "auto" and \
            steering.tuning is not None:
        run.tuning = steering.tuning
        variant = Variant(run.tuning.lowering, run.tuning.flag_set, run.tuning.flags)
    if variant is not None:
        recipe = variant.applied_to(recipe)
    restore_dispatch_configs(recipe.compile.flags, out)
    first = steering.first_lowering if recipe.lowering == "auto" else None
    run.key = build_key(recipe_origin(recipe), run.target, exported, first,
                        npu={"toolchains": run.npu_versions} if run.npu_versions else None)
    run.back = BackContext(run.target, recipe.lowering, recipe.compile.flags,
                           functools.partial(BundleIdentity.of, recipe, build_key=run.key),
                           run.workdir, run.workdir / "bundle",
                           reproducer_dir=out.parent / f"{out.name}.repro", first_lowering=first)
    run.built = exported
    return exported


def restore_dispatch_configs(flags: tuple[str, ...], out: Path) -> None:
    """A tuned dispatch set the flags name but this home lacks (a build on another machine,
    with the tuning record or a recipe's flag), from the bundle at `out` built with it — the
    bundle carries the set, checked here against its digest. Without one, compiling says
    what is missing (toolchain/iree.py)."""
    digest = parse_edgekit_flags(flags).get("dispatch-configs")
    if digest is None or (dispatch_sets.root() / str(digest)).is_dir() or \
            not (out / MANIFEST).is_file():
        return
    try:
        bundle = load_bundle(out)
        bundle.verify()
    except BundleError:
        return        # not a usable bundle: the missing set is reported as before
    if bundle.manifest.dispatch_configs == digest:
        dispatch_sets.restore(str(digest), bundle.dispatch_config_set(), str(out))


def _remember_sources(skey: str, key: str, tuning, recipe: Recipe, digest: str, read: set[str],
                      steering_files: tuple[Path, ...], timings: dict[str, float]) -> None:
    """Keep the source key's record (source_key.py), once the sources proved deterministic: a
    second load+export of them gives the same program (an unseeded model would otherwise be
    answered from a record of another draw). Costs one load+export per new record."""
    known = source_key.load_record(skey)
    if known is not None and known.key == key and known.still_holds():
        return
    started = time.perf_counter()
    with source_key.recording_reads() as again:
        second = run_plan((LOAD, EXPORT), recipe, recipe, {}, None)
    timings["determinism check"] = round(time.perf_counter() - started, 3)
    if second.digest != digest:
        return           # not deterministic: the full key decides, every time
    files = read | again | {str(p) for p in steering_files}
    source_key.store_record(skey, key, tuning, files)


def with_quantize_mode(recipe: Recipe, mode: str | None) -> Recipe:
    """The recipe with another quantization mode, keeping its calibration and accuracy
    settings ("none": the fp32 model)."""
    if mode is None:
        return recipe
    return frontend_for(recipe.model).with_quantize_mode(recipe, mode)


def recipe_origin(recipe: Recipe) -> dict:
    """What a recipe adds to the build key: the recipe itself (lowering, flags, names,
    tolerances) and its samples file (the golden inputs)."""
    origin = {"recipe": recipe.model_dump(mode="json"),
              "samples": sha256_file(recipe.resolve(recipe.samples)) if recipe.samples
              else None}
    dataset = dataset_digests(recipe)
    return origin if dataset is None else {**origin, "dataset": dataset}


def build_key(origin: dict, target: Target, exported: ExportedModel,
              first_lowering: tuple[str, str] | None = None, npu: dict | None = None) -> str:
    """Everything that decides the bundle's bytes (not its creation time), for `edgekit build`
    and torch.compile graphs alike. `origin`: what the BACK stages are told besides the model
    and target (lowering, flags) and what names the bundle and sets its golden data."""
    npu_part = {"npu": npu} if npu is not None else {}   # NPU toolchains (NPU targets only)
    return cache_key({
        **npu_part,
        "first_lowering": list(first_lowering) if first_lowering else None,
        "model": exported.digest,
        "origin": origin,
        "quantization": (exported.quantization.model_dump(mode="json")
                         if exported.quantization else None),
        "target": target.fingerprint(),
        "toolchain": toolchain_versions(),
        "edgekit_code": edgekit_code_digest(),   # an edited rewrite is another toolchain
        "bundle_schema": 2,     # 2: signed (manifest.json.sig)
    })


