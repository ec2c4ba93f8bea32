"""`edgekit build`: recipe + target profile → bundle, through a checked stage plan and the cache.

Plan: FRONT (load → export → quantize, by the recipe's frontend), then the cache is consulted
with the model's digest; BACK (rewrite → import → lower+compile → check quantization →
package) runs on a miss and holds nearly all the time. BACK reads no recipe: torch.compile
graphs (compile/backend.py) go through it and through the same key.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.recipe import Recipe, load_recipe
from edgekit.config.profiles import Target, load_target
from edgekit.errors import BundleError
from edgekit.models.bundle import (Bundle, QuantizationNote, TuningNote, load_bundle, sha256_file,
                                   write_manifest, write_tar)
from edgekit.pipeline.cache import BuildCache, cache_key
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.registry import frontend_for
from edgekit.pipeline.load import LoadedModel
from edgekit.pipeline.lower import (CompiledModule, ImportedModule, check_quantized,
                                    compile_variants, import_module, lower_and_compile)
from edgekit.pipeline.package import BundleIdentity, package_bundle
from edgekit.pipeline.publish import output_lock, publish, staging_dir
from edgekit.pipeline.stages import Stage, check_plan, run_plan
from edgekit.toolchain import iree
from edgekit.toolchain.runner import keep_temps
from edgekit.toolchain.signing import (own_key_tag, sign_bundle, signed_by_a_trusted_key,
                                       verify_bundle)
from edgekit.toolchain.versions import toolchain_versions
from edgekit.validate.golden import check_golden
from edgekit.validate.tolerance import with_build_defaults


@dataclass(frozen=True)
class Variant:
    """A lowering + named flag set: what `edgekit tune` compares and chooses."""

    lowering: str
    flag_set: str
    flags: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.lowering}/{self.flag_set}"

    def applied_to(self, recipe: Recipe) -> Recipe:
        """The recipe with this lowering, and this set's flags before the recipe's own."""
        compile_options = recipe.compile.model_copy(
            update={"flags": (*self.flags, *recipe.compile.flags)})
        # model_copy keeps the private `_path`, so relative paths still resolve
        return recipe.model_copy(update={"lowering": self.lowering, "compile": compile_options})


@dataclass(frozen=True)
class Steering:
    """What earlier runs learned about this model on this target: `edgekit tune`'s choice and
    the lowering `edgekit check` found to build. An explicit input of the build: it enters the
    cache key (through the variant's flags and the lowering order) and the manifest."""

    tuning: TuningNote | None = None
    first_lowering: tuple[str, str] | None = None   # (lowering, why) tried first by `auto`


# (model digest, target) → what steers the build; the application layer supplies it, reading
# the tuning records and check verdicts (the pipeline itself reads no side files).
Steer = Callable[[str, Target], Steering]


@dataclass(frozen=True)
class BuildOptions:
    recipe: Path
    target: str
    out: Path | None = None         # default: build/<app>-<target>
    use_cache: bool = True
    tar: bool = False               # also write <out>.tar
    use_tuned: bool = True          # apply the steering's tuning choice (if `steer` is given)
    variant: Variant | None = None  # build this lowering + flag set instead (tune's candidates)
    steer: Steer | None = None      # what earlier tune/check runs learned (see Steering)
    quantize: str | None = None     # "none" or a mode: overrides the recipe's `quantize:` mode
    private: bool = False           # the bundle goes to a new temporary directory, not `out`
                                    # (deploy: its own copy); the caller removes its parent
    trust_pickle: bool = False      # load the recipe's .pt2 (`--trust-pickle`): it is unpickled


@dataclass(frozen=True)
class BuildResult:
    bundle: Bundle
    cached: bool
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    tar: Path | None = None


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
    recipe = with_quantize_mode(load_recipe(options.recipe), options.quantize)
    if options.trust_pickle:
        recipe = recipe.trusting_pickle()
    target = load_target(options.target)
    out = (options.out or default_out(recipe, target)).resolve()
    timings: dict[str, float] = {}
    workdir = Path(tempfile.mkdtemp(prefix="edgekit-build-"))
    try:
        exported = run_plan(FRONT, recipe, recipe, timings, on_stage)
        steering = options.steer(exported.digest, target) if options.steer else Steering()
        variant, tuning = options.variant, None
        if variant is None and options.use_tuned and recipe.lowering == "auto" and \
                steering.tuning is not None:
            tuning = steering.tuning
            variant = Variant(tuning.lowering, tuning.flag_set, tuning.flags)
        if variant is not None:
            recipe = variant.applied_to(recipe)
        first = steering.first_lowering if recipe.lowering == "auto" else None
        key = build_key(recipe_origin(recipe), target, exported, first)
        ctx = BackContext(target, recipe.lowering, recipe.compile.flags,
                          functools.partial(BundleIdentity.of, recipe, build_key=key), workdir,
                          workdir / "bundle", reproducer_dir=out.parent / f"{out.name}.repro",
                          first_lowering=first)
        cache = BuildCache()
        slot = cache_slot(cache, key)
        entry = cache.lookup(slot) if options.use_cache else None
        cached = entry is not None
        if entry is None:
            bundle = run_plan(BACK, ctx, exported, timings, on_stage)
            entry = cache.store(slot, bundle.path, replace=not options.use_cache)
        if options.private:
            out = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")) / out.name
        _publish(entry, out, tuning, cached, key)
    finally:
        if not keep_temps():
            shutil.rmtree(workdir, ignore_errors=True)
    bundle = load_bundle(out)
    tar = _write_tar(out) if options.tar else None
    return BuildResult(bundle=bundle, cached=cached, seconds=time.perf_counter() - started,
                       stage_seconds=timings, tar=tar)


def cache_slot(cache: BuildCache, key: str) -> str:
    """Where this build is cached: under `key`, unless that entry was signed by a key this
    $EDGEKIT_HOME does not trust (a cache shared by several homes or users): then under `key`
    and this home's signing key, built here once. Trusting it would accept bundles nobody here
    signed; re-signing it would sign what this key never built."""
    entry = cache.lookup(key)
    if entry is None or signed_by_a_trusted_key(entry):
        return key
    return f"{key}-{own_key_tag()}"


def default_out(recipe: Recipe, target: Target) -> Path:
    return Path("build") / f"{recipe.name}-{target.name}"


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
              first_lowering: tuple[str, str] | None = None) -> str:
    """Everything that decides the bundle's bytes (not its creation time), for `edgekit build`
    and torch.compile graphs alike. `origin`: what the BACK stages are told besides the model
    and target (lowering, flags) and what names the bundle and sets its golden data."""
    return cache_key({
        "first_lowering": list(first_lowering) if first_lowering else None,
        "model": exported.digest,
        "origin": origin,
        "quantization": (exported.quantization.model_dump(mode="json")
                         if exported.quantization else None),
        "target": target.fingerprint(),
        "toolchain": toolchain_versions(),
        "bundle_schema": 2,     # 2: signed (manifest.json.sig)
    })


def _check_copy(copy: Path, cached: bool, key: str, entry: Path) -> None:
    """The copy of cache `entry` is what its signer built, under this cache key (signed in its
    manifest): a cache entry changed after it was stored (another model swapped in with a
    re-hashed manifest, or another signed bundle copied over it) fails here."""
    try:
        bundle = load_bundle(copy)
        bundle.verify()
        verify_bundle(copy)
        if bundle.manifest.build_key != key:
            raise BundleError(f"it was built under cache key {bundle.manifest.build_key[:12]}…"
                              f", not {key[:12]}… (another build)", where=str(entry))
    except BundleError as exc:
        if not cached:
            raise
        raise type(exc)(f"the cached build is not what was built: {exc.what}", where=exc.where,
                        hint="`edgekit build --no-cache` rebuilds it and replaces the cache "
                             "entry") from None


def _record_tuning(out: Path, tuning: TuningNote | None) -> bool:
    """The tuning note, and the runtime driver it implies, live in the published manifest only:
    they are not part of the module's bytes, so re-tuning to the same variant stays a cache
    hit. (The driver is part of the release id: run.env carries it to the device.)"""
    bundle = load_bundle(out)
    m = bundle.manifest
    # the driver the tuner measured the choice with (local-sync for one thread)
    driver = iree.driver_for_threads(m.runtime_driver, tuning.threads) if tuning \
        else m.runtime_driver
    if m.tuning != tuning or m.runtime_driver != driver:
        write_manifest(out, m.model_copy(update={"tuning": tuning, "runtime_driver": driver}))
        return True   # the manifest changed: signed again
    return False


def _publish(entry: Path, out: Path, tuning: TuningNote | None, cached: bool,
             key: str) -> None:
    """Copy the cached bundle beside `out`, check it is what was built, finish it there (the
    tuning note, signed again), then publish it whole: readers of `out` see the old bundle or
    the new one, never a mix (publish.py)."""
    staging = staging_dir(out)
    try:
        shutil.copytree(entry, staging, dirs_exist_ok=True)
        _check_copy(staging, cached, key, entry)
        if _record_tuning(staging, tuning):
            sign_bundle(staging)
        publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)   # gone already when published


def _write_tar(out: Path) -> Path:
    archive = out.parent / f"{out.name}.tar"
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-tar-", dir=out.parent) as tmp:
        with output_lock(out, shared=True):
            write_tar(out, Path(tmp) / archive.name)
        os.replace(Path(tmp) / archive.name, archive)
    return archive
