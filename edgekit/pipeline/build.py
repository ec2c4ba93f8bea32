"""`edgekit build`: recipe + target profile → bundle, through a checked stage plan and the cache.

Plan: FRONT (load → export → quantize, by the recipe's frontend), then the cache is consulted
with the model's digest; BACK (rewrite → import → lower+compile → check quantization →
package) runs on a miss and holds nearly all the time. BACK reads no recipe: torch.compile
graphs (compile/backend.py) go through it and through the same key.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.recipe import Recipe
from edgekit.config.profiles import Target, load_target
from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.errors import BundleError
from edgekit.models.bundle import MANIFEST, Bundle, QuantizationNote, load_bundle, sha256_file
# the options and results live in a torch-free module (a source-keyed hit imports no toolchain);
# re-exported here, where callers have always found them
from edgekit.pipeline.build_types import (BuildOptions, BuildResult, Steer, Steering,  # noqa: F401
                                          Variant, default_out)
from edgekit.pipeline.cache import BuildCache, cache_key
from edgekit.pipeline.hit import _publish, _write_tar, cache_slot
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.load import LoadedModel
from edgekit.pipeline.lower import (CompiledModule, ImportedModule, check_quantized,
                                    compile_variants, import_module, lower_and_compile)
from edgekit.pipeline.package import BundleIdentity, package_bundle
from edgekit.pipeline import source_key
from edgekit.pipeline.stages import Stage, check_plan, run_plan
from edgekit.toolchain import dispatch_sets
from edgekit.toolchain.runner import keep_temps
from edgekit.toolchain.versions import edgekit_code_digest, toolchain_versions
from edgekit.validate.golden import check_golden
from edgekit.validate.tolerance import with_build_defaults


@dataclass(frozen=True)
class BackContext:
    """What the BACK stages read besides the model: from a recipe (`edgekit build`) or from a
    torch.compile graph's settings (compile/backend.py)."""

    target: Target
    lowering: str                   # "auto" or one lowering
    flags: tuple[str, ...]          # after the profile's (edgekit's own `--edgekit-…` too)
    identity: Callable[[QuantizationNote | None], BundleIdentity]  # names the bundle
    workdir: Path
    bundle_dir: Path
    reproducer_dir: Path
    first_lowering: tuple[str, str] | None = None
    # an NPU target's own stage (pipeline/npu): the compiled CPU module → the same with its
    # NPU part (rknn: the .rknn, simulated); None: no NPU
    npu: Callable[[CompiledModule, Path], CompiledModule] | None = None


# The context of the FRONT stages is the recipe; its frontend comes from the recipe's `model:`
# and travels on in the values (LoadedModel.frontend, ExportedModel.frontend).
FRONT: tuple[Stage[Recipe], ...] = (
    Stage("load", Recipe, LoadedModel,
          lambda recipe, _: frontend_for(recipe.model).load(recipe)),
    Stage("export", LoadedModel, ExportedModel,
          lambda recipe, loaded: loaded.frontend.export(recipe, loaded)),
    Stage("quantize", ExportedModel, ExportedModel,
          lambda recipe, exported: exported.frontend.quantize(recipe, exported)),
    Stage("check golden", ExportedModel, ExportedModel,
          lambda recipe, exported: refuse_uninformative(recipe, exported)),
)
BACK: tuple[Stage[BackContext], ...] = (
    Stage("rewrite", ExportedModel, ExportedModel,
          lambda ctx, exported: exported.frontend.rewrite(exported, ctx.flags)),
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
    Stage("npu", CompiledModule, CompiledModule,
          lambda ctx, compiled: ctx.npu(compiled, ctx.workdir) if ctx.npu else compiled),
    Stage("package", CompiledModule, Bundle,
          lambda ctx, compiled: package_bundle(
              compiled, ctx.identity(compiled.quantization), ctx.target, ctx.bundle_dir)),
)
check_plan(FRONT, Recipe, ExportedModel)
check_plan(BACK, ExportedModel, Bundle)


def refuse_uninformative(recipe: Recipe, exported: ExportedModel) -> ExportedModel:
    """Before anything compiles: refuse golden outputs that cannot tell a right module from a
    wrong one (validate/golden.py), unless the recipe accepts them. Held to the tolerances the
    bundle will carry (a quantized build's own), over every validation sample (an output that
    is the same for all of them, while their inputs differ, is refused too)."""
    mode = exported.quantization.mode if exported.quantization else None
    check_golden(with_build_defaults(recipe.validation, mode),
                 [o.name for o in exported.outputs], [exported.golden, *exported.more_golden],
                 [exported.samples, *exported.more_samples], where=str(recipe.path))
    return exported


def build(options: BuildOptions, on_stage: Callable[[str], None] | None = None) -> BuildResult:
    """Build (or fetch from the cache) the bundle for a recipe and target profile."""
    started = time.perf_counter()
    base = source_key.loaded_recipe(options)
    recipe = with_quantize_mode(base, options.quantize)
    target = load_target(options.target)
    npu_versions = _npu_versions(target)   # before anything runs: a missing plugin is exit 5
    skey = source_key.source_key(options, base, target)
    out = (options.out or default_out(recipe, target)).resolve()
    timings: dict[str, float] = {}
    workdir = BuildCache().workdir()   # on the cache's filesystem: the bundle moves in
    try:
        with source_key.recording_reads() as read:
            first_export = run_plan(FRONT[:2], recipe, recipe, timings, on_stage)
            npu_graph = None
            if target.npu is not None and target.npu.kind == "ethos-u":
                # the NPU's quantizer replaces the recipe's (rknpu: a BACK stage, rknn.py)
                from edgekit.pipeline.npu import steps as npu_steps
                exported, npu_graph = npu_steps.front(recipe, first_export, target, workdir,
                                                      timings, on_stage)
                exported = run_plan(FRONT[3:], recipe, exported, timings, on_stage)
            else:
                exported = run_plan(FRONT[2:], recipe, first_export, timings, on_stage)
            steering = options.steer(exported.digest, target) if options.steer else \
                Steering(read_from=())
        # the build's own scratch files (an NPU venv's outputs) are no source of the model
        read.difference_update({f for f in read if Path(f).is_relative_to(workdir.resolve())})
        front_recipe, variant, tuning = recipe, options.variant, None
        if variant is None and options.use_tuned and recipe.lowering == "auto" and \
                steering.tuning is not None:
            tuning = steering.tuning
            variant = Variant(tuning.lowering, tuning.flag_set, tuning.flags)
        if variant is not None:
            recipe = variant.applied_to(recipe)
        restore_dispatch_configs(recipe.compile.flags, out)
        first = steering.first_lowering if recipe.lowering == "auto" else None
        origin = recipe_origin(recipe)
        if npu_versions:
            origin["npu"] = npu_versions
        key = build_key(origin, target, exported, first,
                        npu=npu_steps.key_part(target) if npu_graph is not None else None)
        ctx = BackContext(target, recipe.lowering, recipe.compile.flags,
                          functools.partial(BundleIdentity.of, recipe, build_key=key), workdir,
                          workdir / "bundle", reproducer_dir=out.parent / f"{out.name}.repro",
                          first_lowering=first, npu=_npu_stage(target, recipe, first_export))
        cache = BuildCache()
        slot = cache_slot(cache, key)
        entry = cache.lookup(slot) if options.use_cache else None
        cached = entry is not None
        if entry is None and npu_graph is not None:
            bundle = npu_steps.back(
                exported, npu_graph, target, workdir,
                lambda: run_plan(BACK, ctx, exported, timings, on_stage),
                lambda made: _npu_only(ctx, exported, made), timings, on_stage)
            entry = cache.store(slot, bundle.path, replace=not options.use_cache)
        elif entry is None:
            bundle = run_plan(BACK, ctx, exported, timings, on_stage)
            entry = cache.store(slot, bundle.path, replace=not options.use_cache)
        if skey is not None and steering.read_from is not None:
            _remember_sources(skey, key, tuning, front_recipe, first_export.digest, read,
                              steering.read_from, timings)
        if options.private:
            out = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")) / out.name
        bundle = _publish(entry, out, tuning, cached, key)   # parsed and verified once
    finally:
        if not keep_temps():
            shutil.rmtree(workdir, ignore_errors=True)
    tar = _write_tar(out) if options.tar else None
    return BuildResult(bundle=bundle, cached=cached, seconds=time.perf_counter() - started,
                       stage_seconds=timings, tar=tar)


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


# --- NPU targets: each NPU family's stage (pipeline/npu) ------------------------------------

def _npu_versions(target: Target) -> dict[str, str]:
    """The NPU toolchain's versions (part of the build key); raises ToolchainMissing."""
    from edgekit.pipeline.npu import rknn
    return rknn.toolchain_versions() if rknn.wants_rknn(target) else {}


def _npu_stage(target: Target, recipe: Recipe, float_model: ExportedModel):
    """The BACK stage that adds the NPU part, from the float model (before quantization)."""
    from edgekit.pipeline.npu import rknn
    if not rknn.wants_rknn(target):
        return None
    return lambda compiled, workdir: rknn.with_npu(compiled, rknn.build_rknn(
        rknn.job_for(recipe, float_model), compiled.exported, target, workdir))


def _npu_only(ctx: BackContext, exported: ExportedModel, made) -> Bundle:
    from edgekit.pipeline.npu.bundle import npu_only
    return npu_only(exported, ctx.identity(exported.quantization), ctx.target, ctx.bundle_dir,
                    made)


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
        second = run_plan(FRONT[:2], recipe, recipe, {}, None)
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
    return {"recipe": recipe.model_dump(mode="json"),
            "samples": sha256_file(recipe.resolve(recipe.samples)) if recipe.samples else None}


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


