"""A bundle checked once: its manifest parsed, every file's sha256 and the manifest's signature
verified. Later steps (deploy, inspect, a fleet's devices) take a `VerifiedBundle` instead of
reading and checking the bundle again at every hop (issue 39: a cold `deploy --recipe` parsed
the manifest three times and checked sha256s and signature twice each).

The host's check refuses a bad bundle early, with a clear line; the device's verify.sh checks
signature and sha256s again on the bytes it received, before a release is activated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from edgekit.errors import BundleNotTrusted
from edgekit.models.bundle import Bundle, load_bundle
from edgekit.toolchain.signing import verify_bundle


@dataclass(frozen=True)
class VerifiedBundle(Bundle):
    """A Bundle whose files matched their sha256s and whose signature was checked when it was
    made (by `verify` only). `signer`: the trusted principal; None when the bundle is
    unsigned or its signer untrusted and the caller allowed that (`unsigned` says why)."""

    signer: str | None = None
    unsigned: str = ""

    def require_signed(self, hint: str = "pass --allow-unsigned to deploy it anyway") -> None:
        """BundleNotTrusted unless the signature was trusted (a bundle verified with
        allow_unsigned, given to a step that does not allow it)."""
        if self.signer is None:
            raise BundleNotTrusted(self.unsigned or "the bundle's signature is not trusted",
                                   where=str(self.path), hint=hint)

    def moved_to(self, path: Path) -> VerifiedBundle:
        """The same verified bundle after its directory was renamed to `path`."""
        return dataclasses.replace(self, path=Path(path))


def verify(bundle: Bundle, allow_unsigned: bool = False) -> VerifiedBundle:
    """Check `bundle` once: every file against its sha256 (BundleError), then the manifest's
    signature (BundleNotTrusted, unless `allow_unsigned`: then signer None and the reason)."""
    if isinstance(bundle, VerifiedBundle) and (bundle.signer or allow_unsigned):
        return bundle
    bundle.verify()
    try:
        signer, unsigned = verify_bundle(bundle.path), ""
    except BundleNotTrusted as exc:
        if not allow_unsigned:
            raise
        signer, unsigned = None, exc.what
    return VerifiedBundle(bundle.path, bundle.manifest, bundle.scratch, signer=signer,
                          unsigned=unsigned)


def open_verified(path: str | Path, allow_unsigned: bool = False) -> VerifiedBundle:
    """Open a bundle directory or .tar and verify it (a .tar's extraction is released when
    verification fails; otherwise the caller releases it, see Bundle)."""
    bundle = load_bundle(path)
    try:
        return verify(bundle, allow_unsigned)
    except BaseException:
        bundle.release()
        raise


def signed_by_us(bundle: Bundle, principal: str) -> VerifiedBundle:
    """A bundle this process verified and then signed again with its own key (the build
    records the tuning note in a verified manifest): verified, signed by `principal`."""
    return VerifiedBundle(bundle.path, bundle.manifest, bundle.scratch, signer=principal)


__all__ = ["VerifiedBundle", "open_verified", "signed_by_us", "verify"]
