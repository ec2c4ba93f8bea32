"""Stage `package`: module + golden inputs/outputs + manifest with sha256 of every file, signed
(manifest.json.sig, by the signing key: toolchain/signing.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.config.recipe import Hooks, Recipe, Validation
from edgekit.config.profiles import Target
from edgekit.errors import ConfigError
from edgekit.models.bundle import (DISPATCH_CONFIGS, MODULE, VARIANTS, Bundle, GoldenSet,
                                   Manifest, ModuleFunction, ModuleVariant, QuantizationNote,
                                   build_stamp, check_payload_name, sha256_file,
                                   write_manifest)
from edgekit.pipeline.lower import CompiledModule
from edgekit.toolchain import dispatch_sets
from edgekit.toolchain.signing import sign_bundle
from edgekit.toolchain.versions import iree_compiler_version, toolchain_versions
from edgekit.validate.folded import folded_input
from edgekit.validate.tolerance import with_build_defaults


@dataclass(frozen=True)
class BundleIdentity:
    """What names a bundle and how strictly it is validated (from a recipe, or from a
    torch.compile graph)."""

    app: str
    model_source: str
    recipe_digest: str
    tolerances: Validation
    hooks: Hooks | None = None
    build_key: str = ""             # the cache key it is stored under (signed with it)

    @classmethod
    def of(cls, recipe: Recipe, quantization: QuantizationNote | None = None,
           build_key: str = "") -> "BundleIdentity":
        return cls(app=recipe.name, model_source=recipe.source,
                   recipe_digest=sha256_file(recipe.path),
                   tolerances=_tolerances(recipe, quantization),
                   hooks=recipe.hooks if recipe.hooks.after_activate or recipe.hooks.health
                   else None, build_key=build_key)


def _tolerances(recipe: Recipe, quantization: QuantizationNote | None) -> Validation:
    """The recipe's `validation:`, its top-level gaps filled by a quantized build's defaults
    (int8: one int8 step; fp16: float16's rule): the manifest says what a device is held to."""
    if quantization is None:
        return recipe.validation
    return with_build_defaults(recipe.validation, quantization.mode,
                               quantization.reference_spread)


def _storable(array: np.ndarray) -> np.ndarray:
    """The array as a .npy can hold it: ml_dtypes' types (bfloat16, float8) as raw bytes of
    their width ('<V2', '<V1'), which numpy reads back and IREE's runtime takes as that type
    (float8_e5m2 would be written as '<f1', which neither reads)."""
    if array.dtype.isbuiltin != 2:   # 2: a user-defined (ml_dtypes) type
        return array
    return array.view(f"V{array.dtype.itemsize}")


def write_golden(directory: Path, exported) -> tuple[list[str], list[str], list[GoldenSet],
                                                  list[str]]:
    """The golden inputs and outputs under golden/: (inputs, outputs, further sets, every
    file written)."""
    (directory / "golden").mkdir(parents=True, exist_ok=True)
    inputs = [f"golden/input_{i}.npy" for i in range(len(exported.samples))]
    outputs = [f"golden/output_{i}.npy" for i in range(len(exported.golden))]
    more = [GoldenSet(inputs=tuple(f"golden/s{k}_input_{i}.npy" for i in range(len(s))),
                      outputs=tuple(f"golden/s{k}_output_{i}.npy" for i in range(len(g))))
            for k, (s, g) in enumerate(zip(exported.more_samples, exported.more_golden), 1)]
    written = [*zip(inputs + outputs, exported.samples + exported.golden)]
    for names, s, g in zip(more, exported.more_samples, exported.more_golden):
        written += zip((*names.inputs, *names.outputs), (*s, *g))
    # another function's samples (an LLM's decode steps) after the entry function's: the
    # sample numbers a device's run.sh knows stay those of the entry function's sets
    for function in exported.functions:
        for k, (s, g) in enumerate(zip(function.samples, function.golden), 1):
            names = GoldenSet(
                inputs=tuple(f"golden/{function.name}{k}_input_{i}.npy" for i in range(len(s))),
                outputs=tuple(f"golden/{function.name}{k}_output_{i}.npy"
                              for i in range(len(g))), function=function.name)
            more.append(names)
            written += zip((*names.inputs, *names.outputs), (*s, *g))
    for rel, array in written:
        np.save(directory / rel, _storable(array), allow_pickle=False)
    return inputs, outputs, more, [rel for rel, _ in written]


def _dispatch_configs(flags: tuple[str, ...], directory: Path) -> tuple[str, list[str]]:
    """(digest, files) of the tuned dispatch set the module was compiled with, copied into
    the bundle: what rebuilding it elsewhere needs (toolchain/dispatch_sets.py)."""
    digest = dispatch_sets.digest_of_flags(flags)
    if digest is None:
        return "", []
    files = dispatch_sets.read_set(dispatch_sets.root() / digest)
    if dispatch_sets.set_digest(files) != digest:
        raise ConfigError(f"the tuned dispatch configurations {digest[:12]}… were changed "
                          f"after `edgekit tune` stored them", key="--edgekit-dispatch-configs",
                          where=str(dispatch_sets.root() / digest),
                          hint="run `edgekit tune` again, or build --no-tuned")
    (directory / DISPATCH_CONFIGS).mkdir(exist_ok=True)
    written = []
    for name, source in files.items():
        rel = check_payload_name(f"{DISPATCH_CONFIGS}/{name}.mlir")
        (directory / rel).write_text(source)
        written.append(rel)
    return digest, written


def package_bundle(compiled: CompiledModule, identity: BundleIdentity, target: Target,
                   directory: Path) -> Bundle:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(compiled.vmfb, directory / MODULE)
    exported = compiled.exported
    inputs, outputs, more, written = write_golden(directory, exported)
    variants = []
    if compiled.variants:
        (directory / VARIANTS).mkdir(exist_ok=True)
    for variant, vmfb in compiled.variants:
        rel = f"{VARIANTS}/{variant.name}.vmfb"
        shutil.copyfile(vmfb, directory / rel)
        variants.append(ModuleVariant(name=variant.name, file=rel, cpu=variant.cpu.cpu,
                                      features=variant.cpu.features))
    npu_files = []
    if compiled.npu is not None:    # the NPU compiler's artifact and report (pipeline/npu)
        for rel, made in compiled.npu.files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(made, directory / rel)
            npu_files.append(rel)
    configs, config_files = _dispatch_configs(compiled.flags, directory)
    files = {rel: sha256_file(directory / rel)
             for rel in [MODULE, *(v.file for v in variants), *written, *npu_files,
                         *config_files]}
    manifest = Manifest(
        app=identity.app,
        created_at=build_stamp(),
        model_source=identity.model_source,
        model_digest=exported.digest,
        recipe_digest=identity.recipe_digest,
        target=target.name,
        target_profile=target.profile(),
        backend=target.backend,
        arch=target.arch,
        runtime_driver=target.runtime.driver,
        compiler_version=iree_compiler_version(),
        compile_flags=compiled.flags,
        inputs=exported.inputs,
        outputs=exported.outputs,
        golden_inputs=tuple(inputs),
        golden_outputs=tuple(outputs),
        tolerances=identity.tolerances,
        lowering=compiled.lowering,
        quantization=compiled.quantization,
        hooks=identity.hooks,
        build_key=identity.build_key,
        # an NPU part's compilers beside edgekit's toolchain (its note lists them too)
        toolchain={**toolchain_versions(), **(compiled.npu.note.compiler if compiled.npu else {})},
        golden_reference=exported.reference,
        more_golden=tuple(more),
        variants=tuple(variants),
        npu=compiled.npu.note if compiled.npu is not None else None,
        model_notes=exported.notes,
        functions=tuple(ModuleFunction(name=f.name, inputs=f.inputs, outputs=f.outputs,
                                       role=f.role) for f in exported.functions),
        float32_error=exported.float32_error,
        folded_inputs=tuple(folded_input(name, value) for name, value in exported.folded),
        dispatch_configs=configs,
        files=files,
    )
    write_manifest(directory, manifest)
    sign_bundle(directory)   # before the cache stores it: a cache hit must carry a signature
    return Bundle(directory, manifest)
