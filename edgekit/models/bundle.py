"""The bundle: module.vmfb + golden inputs/outputs + manifest.json with sha256 of every file.

A bundle is a directory (or a .tar of one). Its manifest records everything a device needs to
decide whether it can run it and to prove that it does: target, compile flags, the IREE version
the runtime must match, the entry function, the signature and the tolerances. The manifest is
signed (manifest.json.sig, see toolchain/signing.py).

Containment: a bundle holds a closed set of plain files — manifest.json, its signature,
module.vmfb, golden/<name>.npy (and variants/, npu/, dispatch-configs/ files) — and nothing
else is read, extracted or uploaded. A manifest naming any other path (`../../.profile`,
`/etc/x`, `golden/a/b.npy`) is malformed; a symlink, hard link or device in a bundle directory
or archive is refused.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pydantic

from edgekit.config.recipe import Hooks, LayerError, QuantizeSearch, Validation
from edgekit.config.schema_base import Frozen
from edgekit.models.dataset import DatasetNote
from edgekit.config.stamped import StampedCache
from edgekit.errors import BundleError

MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"     # ssh-keygen -Y sign over the manifest's bytes
MODULE = "module.vmfb"
VARIANTS = "variants"   # more CPU modules: variants/<name>.vmfb
GOLDEN = "golden"
NPU = "npu"             # an NPU compiler's artifact and report: npu/<name>
DISPATCH_CONFIGS = "dispatch-configs"   # the tuned per-dispatch set: dispatch-configs/<exe>.mlir
SCHEMA_VERSION = 1
# The only payload names a manifest may list (the device's verify.sh holds the same set).
_PAYLOAD = re.compile(r"module\.vmfb|golden/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.npy|"
                      r"variants/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.vmfb|"
                      # an NPU compiler's output and report (NPU targets)
                      r"npu/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.(?:tosa|tflite|csv|rknn|json)|"
                      # the tuned dispatch configurations the module was compiled with
                      r"dispatch-configs/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.mlir")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_payload_name(name: str) -> str:
    """`name` if a bundle may hold it (module.vmfb, golden/<plain name>.npy); else ValueError."""
    if not _PAYLOAD.fullmatch(name) or ".." in name:
        raise ValueError(f"file {name!r} is not one a bundle may hold (expected one of: "
                         f"{MODULE}, {GOLDEN}/<letters, digits, . _ ->.npy, "
                         f"{VARIANTS}/<name>.vmfb, npu/<name>.tosa|tflite|csv|rknn|json, "
                         f"{DISPATCH_CONFIGS}/<executable>.mlir)")
    return name


class TensorSig(Frozen):
    name: str
    shape: tuple[int | str, ...]
    dtype: str


class FoldedInput(Frozen):
    """An input whose sample value was built into the module as a constant (a shape or axes
    input, or one the recipe marks `static: true`): the module ignores what is passed for it,
    so a sample with another value is refused (validate/folded.py)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    values: tuple[int | float | bool, ...] = pydantic.Field(max_length=4096)  # flattened


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
    # the runtime the choice was timed in: in-process (IREE's Python runtime, the lean call
    # path) or tools (iree-benchmark-module here or on the device); older notes: tools
    measured_in: Literal["in-process", "tools"] = "tools"
    tuned_at: str


class OutputAccuracy(Frozen):
    name: str
    max_abs_error: float
    min_cosine: float | None        # the worst held-out sample; None: undefined on every
    mean_cosine: float | None       # sample (an all-zero output: the abs error judges it)
    top1_agreement: float | None = None  # classifiers (logits-like outputs) only


class AccuracyReport(Frozen):
    """The quantized model vs the fp32 model on held-out samples (not the calibration set)."""

    samples: int
    source: str
    reference: str = "fp32 PyTorch model"
    outputs: tuple[OutputAccuracy, ...]


class ReferenceSpread(Frozen):
    """How far an int8 build's golden reference is from itself when PyTorch runs it in another
    summation order (its convolutions without oneDNN, channels-last images): a requantization
    that rounds the other way, carried through the layers — the least a right module may differ
    by (validate/tolerance.py widens the int8 defaults to twice this)."""

    output: str
    cosine: float                     # worst over the golden samples and the runs
    max_abs_error: float
    runs: str = ""                    # the other orders tried


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
    # int8: matmuls of two computed operands left float (`quantize.activation_matmuls`)
    float_matmuls: int = 0
    accuracy: AccuracyReport | None = None  # None: no fp32 reference (an ONNX QDQ model alone)
    lowering: str = ""                # the path the module took (set at compile)
    contractions: ContractionCensus | None = None
    golden: str = "outputs of the quantized PyTorch model (what the module must reproduce)"
    # int8 with layers kept float (`quantize.keep_float`, chosen by `edgekit quantize search`
    # from `max_drop`): which, and their measured error in the all-int8 model (none: named
    # by hand); `search`: the per-layer errors and the candidates' dataset scores
    float_layers: tuple[LayerError, ...] = ()
    search: QuantizeSearch | None = None
    # int8: the reference against itself in other summation orders, per float output
    reference_spread: tuple[ReferenceSpread, ...] = ()


class ModuleVariant(Frozen):
    """A further module of the same model for another CPU (the profile's `variants:`)."""

    name: str
    file: str                         # variants/<name>.vmfb, listed in `files`
    cpu: str
    features: str = ""


class NpuOp(Frozen):
    """Where one op of the integer model runs, and why."""

    op: str                           # e.g. aten.convolution / tosa.CONV2D
    placement: Literal["npu", "cpu", "unsupported"]
    reason: str = ""                  # why not on the NPU (no PRO-INT form, …)
    macs: int = 0


class NpuEstimate(Frozen):
    """The NPU compiler's static figures: estimates, never measured latencies."""

    source: str                       # e.g. "Vela 5.2.0 static estimate"
    clock_hz: int | None = None
    cycles: int | None = None
    inferences_per_s: float | None = None
    sram_kib: float | None = None
    dram_kib: float | None = None


class NpuNote(Frozen):
    """What the NPU part of a bundle is, how it was checked, and what runs where. `module.vmfb`
    (when the target has a CPU) is the IREE CPU module of the same integer model: the CPU part
    and the `--cpu-fallback` release."""

    kind: str                         # ethos-u | rknpu (the profile's npu.kind)
    accelerator: str
    artifact: str                     # the NPU compiler's output, listed in `files`
    report: str = ""                  # the NPU compiler's report, listed in `files`
    compiler: dict[str, str] = pydantic.Field(default_factory=dict)  # versions
    ops: tuple[NpuOp, ...] = ()
    npu_mac_share: float | None = None  # share of the model's MACs on the NPU, 0..1
    estimate: NpuEstimate | None = None
    validated_on: str = ""            # "TOSA reference model", "rknn simulator": never "NPU"
    worst_lsb: int | None = None      # worst output difference in LSBs vs the golden outputs
    checks: tuple[str, ...] = ()      # what else passed (strict PRO-INT check, IREE on TOSA…)


class GoldenSet(Frozen):
    """One more validation sample: its input files and the outputs the module must give."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # the module function this sample runs ("": the entry function; see ModuleFunction)
    function: str = pydantic.Field(default="", pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$")


# --- a module with more than one function (an LLM's prefill and decode) -----------------------

class ModuleFunction(Frozen):
    """A further function of module.vmfb besides the entry one (a static-KV-cache LLM's
    `decode` beside its `main` prefill): its signature; its validation samples are the
    `more_golden` sets that name it. Its outputs match the entry function's in number and
    dtype (the device's run.sh writes the same output files for every sample)."""

    name: str = pydantic.Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    role: str = ""                    # what it does, for an application that calls it


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
    # local-task workers the module runs with: the tuned thread count (None: untuned, the
    # device's default topology); run.env carries it to the device's shims
    runtime_threads: int | None = pydantic.Field(default=None, ge=1)
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
    golden_reference: str = ""        # what computed the golden outputs (name and version)
    more_golden: tuple[GoldenSet, ...] = ()  # validation samples after the first
    variants: tuple[ModuleVariant, ...] = ()  # more CPU modules, best first (module.vmfb:
                                              # the baseline)
    npu: NpuNote | None = None        # the NPU part (NPU targets only)
    # sha256 of the tuned per-dispatch configuration set the module was compiled with
    # (toolchain/dispatch_sets.py); its files are dispatch-configs/<executable>.mlir in `files`
    dispatch_configs: str = pydantic.Field(default="", pattern=r"^([0-9a-f]{64})?$")
    dataset: DatasetNote | None = None  # the dataset gate: its files and reference score
    model_notes: tuple[str, ...] = ()  # what the build changed about the model (opset upgrade…)
    functions: tuple[ModuleFunction, ...] = ()  # module functions besides entry_function
    folded_inputs: tuple[FoldedInput, ...] = ()  # inputs built in as constants, with their values
    # per output: eager float32's max abs error against the float64 golden outputs, over every
    # validation sample (`validation.reference: float64`); validation reads the module's
    # error against it (OutputComparison.float32_ratio)
    float32_error: tuple[float, ...] = ()
    build_key: str = ""               # the build cache's key: a signed entry is bound to it
    toolchain: dict[str, str]
    files: dict[str, str] = pydantic.Field(description="relative path -> sha256")

    @pydantic.field_validator("files")
    @classmethod
    def _closed_set(cls, files: dict[str, str]) -> dict[str, str]:
        for name, digest in files.items():
            check_payload_name(name)
            if not _SHA256.fullmatch(digest):
                raise ValueError(f"file {name!r}: {digest!r} is not a sha256 (64 hex digits)")
        return files

    @pydantic.model_validator(mode="after")
    def _golden_listed(self) -> "Manifest":
        unlisted = [g for g in (*self.golden_inputs, *self.golden_outputs,
                                *(f for s in self.more_golden for f in (*s.inputs, *s.outputs)))
                    if g not in self.files]
        if unlisted:
            raise ValueError(f"golden file(s) not in files: {', '.join(unlisted)}")
        named = {self.entry_function, *(f.name for f in self.functions)}
        unknown = sorted({s.function for s in self.more_golden} - named - {""})
        if unknown:
            raise ValueError(f"golden set(s) run function(s) the manifest does not declare: "
                             f"{', '.join(unknown)}")
        return self

    def sample_sets(self) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
        """(function, inputs, outputs) of every validation sample, the golden one first."""
        return [(self.entry_function, self.golden_inputs, self.golden_outputs),
                *((s.function or self.entry_function, s.inputs, s.outputs)
                  for s in self.more_golden)]


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# a fleet rollout hashes the same bundle and runtime files for every device (20 files per
# device, the runtime's megabytes included): each is hashed again only once it changed
_digests = StampedCache(_hash_file)


def sha256_file(path: Path) -> str:
    return _digests.get(Path(path))


@dataclass(frozen=True)
class Bundle:
    """A bundle directory on disk and its parsed manifest. A bundle opened from a .tar lives
    in a temporary directory (`scratch`) that the bundle owns: use it as a context manager
    (`with load_bundle(p) as bundle:`), or call `release()`, so that it is removed."""

    path: Path
    manifest: Manifest
    scratch: Path | None = field(default=None, compare=False)

    def release(self) -> None:
        """Remove the directory a .tar was extracted into (nothing for a bundle directory)."""
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    @property
    def module(self) -> Path:
        return self.path / MODULE

    def file(self, relative: str) -> Path:
        return self.path / relative

    def dispatch_config_set(self) -> dict[str, str]:
        """{executable: configured source} of the tuned dispatch set the module was compiled
        with (empty: none); check `verify()` first, the digest with dispatch_sets.restore."""
        prefix = f"{DISPATCH_CONFIGS}/"
        return {Path(rel).stem: (self.path / rel).read_text()
                for rel in self.manifest.files if rel.startswith(prefix)}

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


def build_stamp() -> str:
    """A bundle's build time, to the microsecond: two builds in the same second still order
    (the downgrade refusal compares them), and the text still sorts as a string on a device."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def write_manifest(directory: Path, manifest: Manifest) -> None:
    (directory / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")


def load_bundle(path: str | Path) -> Bundle:
    """Open a bundle directory or .tar (extracted to a temporary directory that the returned
    bundle owns: release it, see Bundle). The manifest's
    file names are checked (a closed set) and none of them, nor the manifest, may be a
    symlink; sha256s are checked by Bundle.verify, the signature by toolchain.signing."""
    path = Path(path)
    require_bundle_path(path)
    if not (path.is_file() and tarfile.is_tarfile(path)):
        return _open(path, scratch=None)
    scratch, path = _extract(path)
    try:
        return _open(path, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)     # a refused archive leaves nothing behind
        raise


def require_bundle_path(path: Path) -> None:
    """A BundleError that says a bundle path does not exist (not "no manifest.json"), with the
    build command that writes one: a cheap check a command makes before it reaches a device."""
    if path.exists():
        return
    if path.suffix == ".tar" and path.with_suffix("").is_dir():
        hint = (f"`edgekit build` writes the directory {path.with_suffix('')} (a .tar only with "
                "--tar): pass the directory")
    else:
        hint = ("`edgekit build --recipe R --target T` writes build/<app>-<target> (add --tar "
                "for a .tar beside it)")
    raise BundleError("no such bundle: the path does not exist", where=str(path), hint=hint)


def _open(path: Path, scratch: Path | None) -> Bundle:
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError("not a bundle (no manifest.json)", where=str(path),
                          hint="pass the directory or .tar that `edgekit build` wrote")
    _refuse_links(path, [MANIFEST, SIGNATURE])
    try:
        manifest = Manifest.model_validate(json.loads(manifest_path.read_text()))
    except pydantic.ValidationError as exc:
        raise BundleError(f"manifest.json is malformed: {_first_error(exc)}",
                          where=str(manifest_path)) from None
    except ValueError as exc:
        raise BundleError(f"manifest.json is malformed: {str(exc).splitlines()[0]}",
                          where=str(manifest_path)) from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise BundleError(f"bundle schema version {manifest.schema_version} is not supported "
                          f"(this edgekit reads {SCHEMA_VERSION})", where=str(path))
    _refuse_links(path, list(manifest.files))
    return Bundle(path, manifest, scratch)


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def _refuse_links(root: Path, names: list[str]) -> None:
    """Every component of each name under `root` is a plain directory or file, never a
    symlink (a link would be followed here and its target uploaded as the bundle's file)."""
    for name in names:
        path = root
        for part in Path(name).parts:
            path = path / part
            if path.is_symlink():
                raise BundleError(f"{path.relative_to(root)} is a symlink; a bundle holds "
                                  "plain files only", where=str(root),
                                  hint="copy the bundle with `cp -rL`, or rebuild it")


def _extract(archive: Path) -> tuple[Path, Path]:
    """Extract a bundle archive after checking every member: plain files and directories
    with a bundle's names only, in one top folder or none. (the temporary directory, the
    bundle directory in it)"""
    cap = archive_max_bytes()
    try:
        with tarfile.open(archive) as tar:
            members, total = [], 0
            for member in tar:     # headers one by one: a bomb is refused before it is read
                members.append(member)
                total += member.size
                if total > cap:
                    raise BundleError(
                        f"the bundle archive expands to more than {cap:,} bytes "
                        f"({archive.stat().st_size:,} bytes packed); refused before extraction",
                        where=str(archive), hint=f"{ARCHIVE_CAP_ENV} sets the cap (bytes) for "
                                                 "a bundle this large on purpose")
                packed = archive.stat().st_size
                if total > 64 << 20 and total > ARCHIVE_MAX_RATIO * packed:
                    raise BundleError(
                        f"the bundle archive expands {total // max(packed, 1):,}-fold "
                        f"(to {total:,} bytes or more from {packed:,}): no compiled module "
                        "compresses that well; refused before extraction", where=str(archive),
                        hint="rebuild the bundle with `edgekit build --tar`")
            top = _top_folder([m.name for m in members], archive)
            for member in members:
                _check_member(member, top, archive)
            target = Path(tempfile.mkdtemp(prefix="edgekit-bundle-"))
            try:
                tar.extractall(target, members=members, filter="data")
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)
                raise
    except (tarfile.TarError, OSError) as exc:
        raise BundleError(f"the bundle archive cannot be read: {exc}", where=str(archive)) \
            from None
    return target, (target / top if top else target)


# What a bundle archive may expand to (its members' sizes summed from their headers, before a
# byte is written) and how much better than a compiled module it may compress.
ARCHIVE_CAP_ENV = "EDGEKIT_BUNDLE_MAX_BYTES"
ARCHIVE_MAX_BYTES = 4 << 30
ARCHIVE_MAX_RATIO = 100


def archive_max_bytes() -> int:
    raw = os.environ.get(ARCHIVE_CAP_ENV, "")
    if not raw:
        return ARCHIVE_MAX_BYTES
    if not raw.isascii() or not raw.isdigit() or int(raw) <= 0:
        raise BundleError(f"{ARCHIVE_CAP_ENV} must be a number of bytes > 0 (got {raw!r})")
    return int(raw)


def _top_folder(names: list[str], archive: Path) -> str:
    """The one folder every member is in (`edgekit build --tar` writes `<out name>/…`), or ""
    when the bundle's files are at the archive's root."""
    firsts = {name.split("/", 1)[0] for name in names}
    if len(firsts) != 1 or firsts & {MANIFEST, SIGNATURE, MODULE, GOLDEN}:
        return ""
    top = firsts.pop()
    if top != "." and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", top):
        raise BundleError(f"the archive's top folder {top!r} is not a plain name",
                          where=str(archive))
    return top


def _check_member(member: tarfile.TarInfo, top: str, archive: Path) -> None:
    kind = ("a symlink" if member.issym() else "a hard link" if member.islnk()
            else "" if member.isfile() or member.isdir() else "a device or fifo")
    if kind:
        link = f" -> {member.linkname}" if member.linkname else ""
        raise BundleError(f"the archive holds {kind}: {member.name}{link}; a bundle holds plain "
                          "files only", where=str(archive))
    inner = "" if member.name == top else member.name[len(top) + 1:] if top else member.name
    folders = ("", GOLDEN, VARIANTS, NPU, DISPATCH_CONFIGS)
    allowed = inner in (MANIFEST, SIGNATURE, *folders) or \
        bool(_PAYLOAD.fullmatch(inner)) and ".." not in inner
    if not allowed or member.isdir() != (inner in folders):
        raise BundleError(f"the archive holds {member.name!r}, not a file a bundle may hold",
                          where=str(archive), hint=f"a bundle holds {MANIFEST}, {SIGNATURE}, "
                                                   f"{MODULE} and {GOLDEN}/<name>.npy")


def write_tar(directory: Path, archive: Path) -> Path:
    with tarfile.open(archive, "w") as tar:
        tar.add(directory, arcname=directory.name)
    return archive
