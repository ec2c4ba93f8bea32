"""Which bundles a device is given: the host checks a bundle's signature before anything is
uploaded, and installs its trusted signers on the device, where verify.sh checks the
signature again (and every sha256) before a release is activated or rolled back to."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

from edgekit.device import layout
from edgekit.errors import BundleNotTrusted
from edgekit.models.bundle import MANIFEST, SIGNATURE, Bundle
from edgekit.toolchain.signing import trusted_signers, verify_bundle
from edgekit.transport.base import Transport

# verify.sh reads /etc/edgekit/allowed_signers when an administrator installed one, else this
DEVICE_SIGNERS = f"{layout.ROOT}/allowed_signers"


# (manifest, signature, allowed_signers contents) → principal: a fleet rollout checks one
# bundle once per device (two ssh-keygen runs each); the same bytes get the same verdict
_verified: dict[tuple[bytes, bytes, bytes], str] = {}


def check_signature(bundle: Bundle, allow_unsigned: bool = False) -> str | None:
    """The principal that signed the bundle. None when it is unsigned or not trusted and
    `allow_unsigned` (the user's explicit opt-out); otherwise BundleNotTrusted."""
    try:
        key = _contents(bundle.path / MANIFEST, bundle.path / SIGNATURE, trusted_signers())
        if key is not None and key in _verified:
            return _verified[key]
        principal = verify_bundle(bundle.path)
        if key is not None:
            if len(_verified) > 256:
                _verified.clear()
            _verified[key] = principal
        return principal
    except BundleNotTrusted:
        if allow_unsigned:
            return None
        raise


def _contents(*paths: Path) -> tuple[bytes, ...] | None:
    """The sha256 of each file (None when one is missing: no verdict to remember)."""
    try:
        return tuple(hashlib.sha256(p.read_bytes()).digest() for p in paths)
    except OSError:
        return None


def install_signers(conn: Transport) -> None:
    """Put this host's allowed_signers on the device (replaced by one rename: a verify.sh
    running meanwhile reads the old file or the new one)."""
    local = trusted_signers()
    if conn.read_text(DEVICE_SIGNERS) == local.read_text():
        return
    conn.mkdirs(layout.ROOT)
    staging = f"{DEVICE_SIGNERS}.{secrets.token_hex(4)}"
    conn.put(Path(local), staging)
    conn.rename(staging, DEVICE_SIGNERS)
