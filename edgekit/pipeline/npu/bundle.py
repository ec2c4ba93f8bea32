"""An NPU build's bundle: the NPU artifacts under npu/ and the manifest's `npu` note, beside
the IREE CPU module (a Linux NPU board) or without any module (`backend: none`: a
microcontroller NPU gets the artifact and estimates only)."""

from __future__ import annotations

import datetime
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.models.bundle import Bundle, LoweringRecord, Manifest, write_manifest
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.npu.ethos import NpuBuild, add_to_bundle
from edgekit.pipeline.package import BundleIdentity, write_golden
from edgekit.models.bundle import sha256_file
from edgekit.toolchain.signing import sign_bundle
from edgekit.toolchain.versions import iree_compiler_version, toolchain_versions


def _toolchain(build: NpuBuild) -> dict[str, str]:
    return {**toolchain_versions(), **build.note.compiler}


def with_npu(bundle: Bundle, build: NpuBuild) -> Bundle:
    """The CPU module's bundle with the NPU artifacts and note added, signed again."""
    digests = add_to_bundle(bundle.path, build)
    manifest = bundle.manifest.model_copy(update={
        "npu": build.note, "files": {**bundle.manifest.files, **digests},
        "toolchain": {**bundle.manifest.toolchain, **build.note.compiler}})
    write_manifest(bundle.path, manifest)
    sign_bundle(bundle.path)
    return Bundle(bundle.path, manifest)


def npu_only(exported: ExportedModel, identity: BundleIdentity, target: Target,
             directory: Path, build: NpuBuild) -> Bundle:
    """A bundle without module.vmfb: the NPU artifact, its report and the golden data."""
    directory.mkdir(parents=True, exist_ok=True)
    inputs, outputs, more, written = write_golden(directory, exported)
    files = {rel: sha256_file(directory / rel) for rel in written}
    files.update(add_to_bundle(directory, build))
    manifest = Manifest(
        app=identity.app,
        created_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        model_source=identity.model_source, model_digest=exported.digest,
        recipe_digest=identity.recipe_digest, target=target.name,
        target_profile=target.profile(), backend=target.backend, arch=target.arch,
        runtime_driver=target.runtime.driver, compiler_version=iree_compiler_version(),
        compile_flags=(), inputs=exported.inputs, outputs=exported.outputs,
        golden_inputs=tuple(inputs), golden_outputs=tuple(outputs),
        tolerances=identity.tolerances,
        lowering=LoweringRecord(requested="tosa", used="tosa", attempts=(),
                                note="integer TOSA 1.0 from ExecuTorch's Arm backend"),
        quantization=exported.quantization, build_key=identity.build_key,
        toolchain=_toolchain(build), golden_reference=exported.reference,
        more_golden=tuple(more), npu=build.note, model_notes=exported.notes, files=files)
    write_manifest(directory, manifest)
    sign_bundle(directory)
    return Bundle(directory, manifest)
