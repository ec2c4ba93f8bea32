"""Which bundles a device is given: the host checks a bundle's signature before anything is
uploaded, and installs its trusted signers on the device, where verify.sh checks the
signature again (and every sha256) before a release is activated or rolled back to."""

from __future__ import annotations

from pathlib import Path

from edgekit.device import layout
from edgekit.errors import BundleNotTrusted, RemoteCommandFailed
from edgekit.models.bundle import MANIFEST, SIGNATURE, Bundle, sha256_file
from edgekit.toolchain.signing import key_fingerprint, trusted_signers, verify_bundle
from edgekit.transport.base import Transport

# verify.sh reads /etc/edgekit/allowed_signers when an administrator installed one, else this
DEVICE_SIGNERS = f"{layout.ROOT}/allowed_signers"


# (manifest, signature, allowed_signers sha256s) → principal: a fleet rollout checks one
# bundle once per device (two ssh-keygen runs each); the same bytes get the same verdict
_verified: dict[tuple[str, ...], str] = {}


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


def _contents(*paths: Path) -> tuple[str, ...] | None:
    """The sha256 of each file (None when one is missing: no verdict to remember)."""
    try:
        return tuple(sha256_file(p) for p in paths)
    except OSError:
        return None


def signer_lines(text: str) -> list[str]:
    """The entries of an allowed_signers text (comments and blank lines dropped)."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _key_of(line: str) -> str | None:
    """An allowed_signers entry's key (type and base64): the identity of the entry."""
    fields = line.split()
    for i, field in enumerate(fields[:-1]):
        if field.startswith(("ssh-", "ecdsa-", "sk-")):
            return f"{field} {fields[i + 1]}"
    return None


def signer_fingerprint_of(line: str) -> str:
    """OpenSSH's SHA256 fingerprint of an allowed_signers entry's key ("" if none)."""
    key = _key_of(line)
    return "" if key is None else key_fingerprint(key)


def merged_signers(device: str, ours: str) -> str:
    """The device's signers with ours added (by key): a set a deploy adds to and never
    replaces, so a device serves several controllers, each one's releases verifiable."""
    lines = signer_lines(device)
    keys = {_key_of(line) for line in lines}
    lines += [line for line in signer_lines(ours) if _key_of(line) not in keys]
    return "".join(f"{line}\n" for line in lines)


def install_signers(conn: Transport, attempts: int = 3) -> None:
    """Add this host's allowed signers to the device's set (the file replaced by one rename:
    a verify.sh running meanwhile reads the old set or the new one). Another controller's
    addition made at the same moment can race ours: the set is read again after the rename
    and the merge repeated until both are in."""
    ours = trusted_signers().read_text()
    wanted = {_key_of(line) for line in signer_lines(ours)}
    for _ in range(attempts):
        device = conn.read_text(DEVICE_SIGNERS) or ""
        if wanted <= {_key_of(line) for line in signer_lines(device)}:
            return
        _replace_signers(conn, merged_signers(device, ours))
    raise RemoteCommandFailed("the device's allowed_signers keeps changing under this deploy",
                              where=conn.where, argv=["install", DEVICE_SIGNERS], returncode=1,
                              stderr_tail="", hint="deploy again when the other controllers' "
                                                   "deploys are done")


def untrust_signer(conn: Transport, who: str) -> list[str]:
    """Remove from the device's set every signer whose principal or key fingerprint
    (SHA256:…) is `who`; returns the entries removed (none: nothing changes)."""
    device = conn.read_text(DEVICE_SIGNERS) or ""
    lines = signer_lines(device)
    doomed = [line for line in lines
              if line.split()[0] == who or signer_fingerprint_of(line) == who]
    if doomed:
        _replace_signers(conn, "".join(f"{line}\n" for line in lines if line not in doomed))
    return doomed


def _replace_signers(conn: Transport, text: str) -> None:
    conn.mkdirs(layout.ROOT)
    conn.replace_text(DEVICE_SIGNERS, text)
