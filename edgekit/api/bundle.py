"""`edgekit bundle inspect|verify BUNDLE`: what a built bundle (directory or .tar) holds, and
whether a device would accept it — like mender-artifact's `read` and `validate`.

Both open the bundle once (`toolchain.verified`): inspect reports the signature's verdict
without failing on it; verify fails with the exit code of the first problem (BundleError 6:
files, names, containment; BundleNotTrusted 6: the signature), one line and a hint.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from edgekit.device.deploy import release_id
from edgekit.errors import BundleError
from edgekit.models.bundle import (DISPATCH_CONFIGS, GOLDEN, MANIFEST, NPU, SIGNATURE, VARIANTS,
                                   Bundle, load_bundle)
from edgekit.toolchain.verified import VerifiedBundle, verify as verify_once


@dataclass(frozen=True)
class BundleFile:
    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class BundleSummary:
    """A bundle's manifest, summarised (what `bundle inspect` prints)."""

    path: str                         # as given (a directory or .tar)
    app: str
    target: str
    backend: str
    arch: str
    release: str                      # the release id a deploy gives it
    created_at: str
    model_source: str
    lowering: str
    quantization: str | None
    files: tuple[BundleFile, ...]
    total_bytes: int
    validation_samples: int           # golden input/output sets
    golden_files: int
    signed: bool                      # a manifest.json.sig is there
    signer: str | None                # the trusted principal (None: unsigned or untrusted)
    signature: str                    # "trusted (principal)", or why not
    toolchain: dict[str, str]
    compiler_version: str

    def as_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BundleVerdict:
    """What `bundle verify` checked, when every check passed."""

    path: str
    release: str
    files: int
    bytes: int
    signer: str
    checks: tuple[str, ...]

    def as_json(self) -> dict:
        return {"ok": True, **asdict(self)}


def inspect(path: Path) -> BundleSummary:
    """The bundle's manifest summary and its signature's verdict (an untrusted or unsigned
    bundle is inspected, and says so). A bundle whose files do not match their sha256s, or
    whose manifest is malformed, is refused (BundleError): `bundle verify` names the check."""
    with load_bundle(path) as bundle, _named(bundle, Path(path)):
        verified = verify_once(bundle, allow_unsigned=True)
        return _summary(Path(path), verified)


def verify(path: Path) -> BundleVerdict:
    """Check a bundle as a deploy does before anything is uploaded: names and plain files
    (containment), nothing in its directory that the manifest does not list, every file's
    sha256, the signature by a trusted signer. Raises the first problem's error."""
    with load_bundle(path) as bundle, _named(bundle, Path(path)):
        _refuse_unlisted(bundle, Path(path))
        verified = verify_once(bundle)
        m = verified.manifest
        return BundleVerdict(
            path=str(path), release=release_id(verified), files=len(m.files),
            bytes=sum(verified.file(rel).stat().st_size for rel in m.files),
            signer=verified.signer or "",
            checks=("names and plain files only (no links, no paths outside the bundle)",
                    "no file the manifest does not list",
                    f"sha256 of all {len(m.files)} files",
                    f"signature by {verified.signer}, a trusted signer"))


@contextmanager
def _named(bundle: Bundle, given: Path) -> Iterator[None]:
    """Errors name the path the user gave, not the folder a .tar was extracted to."""
    try:
        yield
    except BundleError as exc:
        if not exc.where or str(bundle.path) == str(given):
            raise
        raise type(exc)(exc.what, where=exc.where.replace(str(bundle.path), str(given)),
                        hint=exc.hint) from None


def _summary(given: Path, bundle: VerifiedBundle) -> BundleSummary:
    m = bundle.manifest
    files = tuple(BundleFile(rel, bundle.file(rel).stat().st_size, digest)
                  for rel, digest in sorted(m.files.items()))
    signed = bundle.file(SIGNATURE).is_file()
    verdict = f"trusted ({bundle.signer})" if bundle.signer else bundle.unsigned
    return BundleSummary(
        path=str(given), app=m.app, target=m.target, backend=m.backend, arch=m.arch,
        release=release_id(bundle), created_at=m.created_at, model_source=m.model_source,
        lowering=m.lowering.used, quantization=m.quantization.mode if m.quantization else None,
        files=files, total_bytes=sum(f.bytes for f in files),
        validation_samples=1 + len(m.more_golden),
        golden_files=sum(rel.startswith(f"{GOLDEN}/") for rel in m.files),
        signed=signed, signer=bundle.signer, signature=verdict,
        toolchain=dict(m.toolchain), compiler_version=m.compiler_version)


def _refuse_unlisted(bundle: Bundle, given: Path) -> None:
    """Containment: a bundle holds its manifest, signature and the files the manifest lists,
    nothing else (a stray file is never uploaded, but a bundle carrying one was changed)."""
    listed = {MANIFEST, SIGNATURE, *bundle.manifest.files}
    folders = {GOLDEN, VARIANTS, NPU, DISPATCH_CONFIGS}
    root = bundle.path
    stray = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if str(p.relative_to(root)) not in listed | folders)
    if stray:
        raise BundleError(f"the bundle holds {len(stray)} file(s) its manifest does not list: "
                          f"{', '.join(stray[:5])}{' …' if len(stray) > 5 else ''}",
                          where=str(given), hint="rebuild the bundle with `edgekit build`, or "
                                                 "remove the files that were added to it")


__all__ = ["BundleFile", "BundleSummary", "BundleVerdict", "inspect", "verify"]
