"""A bundle without module.vmfb (`backend: none`: a microcontroller NPU gets the artifact and
estimates only): the NPU part's files under npu/, its manifest note and the golden data. With
a CPU module, `package` (pipeline/package.py) adds the NPU part it finds on the compiled module."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.models.bundle import (Bundle, LoweringRecord, Manifest, build_stamp, sha256_file,
                                   write_manifest)
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu.part import NpuPart
from edgekit.pipeline.package import BundleIdentity, write_golden
from edgekit.toolchain.signing import sign_bundle
from edgekit.toolchain.versions import iree_compiler_version, toolchain_versions


def npu_only(exported: ExportedModel, identity: BundleIdentity, target: Target,
             directory: Path, part: NpuPart) -> Bundle:
    """A bundle without module.vmfb: the NPU artifact, its report and the golden data."""
    directory.mkdir(parents=True, exist_ok=True)
    inputs, outputs, more, written = write_golden(directory, exported)
    for rel, made in part.files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made, directory / rel)
    files = {rel: sha256_file(directory / rel) for rel in [*written, *part.files]}
    manifest = Manifest(
        app=identity.app,
        created_at=build_stamp(),
        model_source=identity.model_source, model_digest=exported.digest,
        recipe_digest=identity.recipe_digest, target=target.name,
        target_profile=target.profile(), backend=target.backend, arch=target.arch,
        runtime_driver=target.runtime.driver, compiler_version=iree_compiler_version(),
        compile_flags=(), inputs=exported.inputs, outputs=exported.outputs,
        golden_inputs=tuple(inputs), golden_outputs=tuple(outputs),
        tolerances=identity.tolerances,
        lowering=LoweringRecord(requested="tosa", used="tosa", attempts=(),
                                note="integer TOSA 1.0 for the NPU's compiler"),
        quantization=exported.quantization, build_key=identity.build_key,
        toolchain={**toolchain_versions(), **part.note.compiler},
        golden_reference=exported.reference,
        more_golden=tuple(more), npu=part.note, model_notes=exported.notes, files=files)
    write_manifest(directory, manifest)
    sign_bundle(directory)
    return Bundle(directory, manifest)
