"""The bundle: module.vmfb + golden inputs/outputs + manifest.json with sha256 of every file.

A bundle is a directory (or a .tar of one). Its manifest records everything a device needs to
decide whether it can run it and to prove that it does: target, compile flags, the IREE version
the runtime must match, the entry function, the signature and the tolerances.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pydantic

from edgekit.config.recipe import Hooks, Validation
from edgekit.config.schema_base import Frozen
from edgekit.errors import BundleError

MANIFEST = "manifest.json"
MODULE = "module.vmfb"
SCHEMA_VERSION = 1


class TensorSig(Frozen):
    name: str
    shape: tuple[int | str, ...]
    dtype: str


class LoweringAttempt(Frozen):
    lowering: str
    ok: bool
    stage: str = ""  # where it failed: "lower" (torch-mlir) or "compile" (iree-compile)
    ops: tuple[str, ...] = ()
    error: str = ""


class LoweringRecord(Frozen):
    requested: str
    used: str
    attempts: tuple[LoweringAttempt, ...]
    note: str = ""  # why this order (e.g. what `edgekit check` learned)


class TuningNote(Frozen):
    """The variant `edgekit tune` chose for this model and target, and what it measured."""

    variant: str                    # "<lowering>/<flag set>"
    lowering: str
    flag_set: str
    flags: tuple[str, ...]
    threads: int
    p50_ms: float
    default_p50_ms: float | None = None
    measured_on: str
    tuned_at: str


class OutputAccuracy(Frozen):
    name: str
    max_abs_error: float
    min_cosine: float               # the worst held-out sample
    mean_cosine: float
    top1_agreement: float | None = None  # classifiers (logits-like outputs) only


class AccuracyReport(Frozen):
    """The quantized model vs the fp32 model on held-out samples (not the calibration set)."""

    samples: int
    source: str
    reference: str = "fp32 PyTorch model"
    outputs: tuple[OutputAccuracy, ...]


class ContractionCensus(Frozen):
    """Element types of the inputs of every contraction in the compiled module (matmuls,
    convolutions), as IREE's global optimization leaves them."""

    integer: int = 0
    f16: int = 0
    f32: int = 0
    other: int = 0
    examples: tuple[str, ...] = ()  # a few float contractions, to say which

    @property
    def total(self) -> int:
        return self.integer + self.f16 + self.f32 + self.other


class QuantizationNote(Frozen):
    mode: str                         # int8 | int8-weights | fp16
    weights: str = ""                 # per-tensor | per-channel (int8 modes)
    calibration: str = ""             # source, and how many samples
    quantized_ops: int = 0            # contractions the quantizer gave int8 inputs
    allow_float_contractions: bool = False
    accuracy: AccuracyReport | None = None  # None: no fp32 reference (an ONNX QDQ model alone)
    lowering: str = ""                # the path the module took (set at compile)
    contractions: ContractionCensus | None = None
    golden: str = "outputs of the quantized PyTorch model (what the module must reproduce)"


class Manifest(Frozen):
    schema_version: int = SCHEMA_VERSION
    app: str
    created_at: str
    model_source: str
    model_digest: str
    recipe_digest: str
    target: str
    target_profile: dict
    backend: str
    arch: str
    runtime_driver: str
    compiler_version: str = pydantic.Field(description="the device runtime must be this version")
    compile_flags: tuple[str, ...]
    entry_function: str = "main"
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    golden_inputs: tuple[str, ...]
    golden_outputs: tuple[str, ...]
    tolerances: Validation
    lowering: LoweringRecord
    tuning: TuningNote | None = None
    quantization: QuantizationNote | None = None
    hooks: Hooks | None = None        # the recipe's, so a prebuilt bundle deploys like its recipe
    toolchain: dict[str, str]
    files: dict[str, str] = pydantic.Field(description="relative path -> sha256")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Bundle:
    """A bundle directory on disk and its parsed manifest."""

    path: Path
    manifest: Manifest

    @property
    def module(self) -> Path:
        return self.path / MODULE

    def file(self, relative: str) -> Path:
        return self.path / relative

    def verify(self) -> None:
        """Raise BundleError unless every recorded file exists with its recorded sha256."""
        for relative, expected in self.manifest.files.items():
            path = self.path / relative
            if not path.is_file():
                raise BundleError(f"bundle file missing: {relative}", where=str(self.path))
            if sha256_file(path) != expected:
                raise BundleError(f"bundle file does not match its sha256: {relative}",
                                  where=str(self.path),
                                  hint="the bundle was modified after it was built; rebuild it")


def write_manifest(directory: Path, manifest: Manifest) -> None:
    (directory / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")


def load_bundle(path: str | Path) -> Bundle:
    """Open a bundle directory or .tar (extracted to a temporary directory)."""
    path = Path(path)
    if path.is_file() and tarfile.is_tarfile(path):
        path = _extract(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError("not a bundle (no manifest.json)", where=str(path),
                          hint="pass the directory or .tar that `edgekit build` wrote")
    try:
        manifest = Manifest.model_validate(json.loads(manifest_path.read_text()))
    except (ValueError, pydantic.ValidationError) as exc:
        raise BundleError(f"manifest.json is malformed: {str(exc).splitlines()[0]}",
                          where=str(manifest_path)) from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise BundleError(f"bundle schema version {manifest.schema_version} is not supported "
                          f"(this edgekit reads {SCHEMA_VERSION})", where=str(path))
    return Bundle(path, manifest)


def _extract(archive: Path) -> Path:
    target = Path(tempfile.mkdtemp(prefix="edgekit-bundle-"))
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")  # refuses absolute paths, links out, devices
    entries = [p for p in target.iterdir()]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else target


def write_tar(directory: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w") as tar:
        tar.add(directory, arcname=directory.name)
    return archive
