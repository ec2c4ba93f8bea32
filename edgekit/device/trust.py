"""Which bundles a device is given: the host checks a bundle's signature before anything is
uploaded, and installs its trusted signers on the device, where verify.sh checks the
signature again (and every sha256) before a release is activated or rolled back to."""

from __future__ import annotations

import secrets
from pathlib import Path

from edgekit.device import layout
from edgekit.errors import BundleNotTrusted
from edgekit.models.bundle import Bundle
from edgekit.toolchain.signing import trusted_signers, verify_bundle
from edgekit.transport.base import Transport

# verify.sh reads /etc/edgekit/allowed_signers when an administrator installed one, else this
DEVICE_SIGNERS = f"{layout.ROOT}/allowed_signers"


def check_signature(bundle: Bundle, allow_unsigned: bool = False) -> str | None:
    """The principal that signed the bundle. None when it is unsigned or not trusted and
    `allow_unsigned` (the user's explicit opt-out); otherwise BundleNotTrusted."""
    try:
        return verify_bundle(bundle.path)
    except BundleNotTrusted:
        if allow_unsigned:
            return None
        raise


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
