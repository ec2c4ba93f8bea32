"""Bundle signatures: OpenSSH's `ssh-keygen -Y sign|verify` over the manifest's bytes.

The manifest holds every file's sha256, so its signature covers the whole bundle. OpenSSH
signatures were chosen over a Python library because the device checks them too, with the
same `ssh-keygen` and no Python (runtime_shims/verify.sh), and because users already have
SSH keys.

Keys (paths in config/paths.py):
- the signing key: $EDGEKIT_SIGNING_KEY (the user's own private key, `.pub` beside it), else
  edgekit's own ed25519 key in $EDGEKIT_HOME/keys/, created on first use (0600, dir 0700);
- the trusted signers: $EDGEKIT_HOME/allowed_signers (OpenSSH's format, each key limited to
  the `edgekit-bundle` namespace). The signing key is added to it on first use, so your own
  builds are trusted; add a colleague's or a CI key with one line:
  `<name> namespaces="edgekit-bundle" ssh-ed25519 AAAA…`. Deploy uploads this file to each
  device (~/.edgekit/allowed_signers), where verify.sh checks against it (or against
  /etc/edgekit/allowed_signers, when an administrator provisioned one).
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import os
import re
import socket
import struct
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from edgekit.config.paths import allowed_signers_path, signing_key_path
from edgekit.errors import BundleNotTrusted, ConfigError, ToolError
from edgekit.models.bundle import MANIFEST, SIGNATURE
from edgekit.toolchain.runner import run_tool

NAMESPACE = "edgekit-bundle"
INSTALL_HINT = "install OpenSSH's client tools (Debian: apt-get install openssh-client)"


def sign_bundle(directory: Path) -> Path:
    """Sign `directory`'s manifest with the signing key; returns the signature's path."""
    key = signing_key()
    trusted_signers()                        # signing with a key trusts it
    signature = directory / SIGNATURE
    signature.unlink(missing_ok=True)        # ssh-keygen does not replace a signature
    run_tool(["ssh-keygen", "-q", "-Y", "sign", "-f", key, "-n", NAMESPACE,
              directory / MANIFEST], what="signing the bundle's manifest", timeout=60,
             hint=INSTALL_HINT)
    return signature


def verify_bundle(directory: Path) -> str:
    """The principal (from allowed_signers) whose key signed `directory`'s manifest.
    Raises BundleNotTrusted when the manifest is unsigned, signed by a key that is not
    trusted, or changed after it was signed."""
    signature = directory / SIGNATURE
    where = str(directory)
    if not signature.is_file():
        raise BundleNotTrusted("the bundle is not signed (no manifest.json.sig)", where=where,
                               hint="build it with `edgekit build` (it signs with your key), "
                                    "or pass --allow-unsigned to deploy it anyway")
    signers = trusted_signers()
    try:
        found = run_tool(["ssh-keygen", "-Y", "find-principals", "-s", signature, "-f", signers],
                         what="finding the bundle's signer", timeout=60, hint=INSTALL_HINT)
    except ToolError as exc:
        if exc.returncode == 127:
            raise
        raise BundleNotTrusted(f"the bundle is signed by a key that is not trusted "
                               f"({signer_fingerprint(signature)})", where=where,
                               hint=f"if you trust its signer, add their public key to "
                                    f"{signers} as: <name> namespaces=\"{NAMESPACE}\" "
                                    f"<key type> <key>") from None
    principal = found.stdout.decode(errors="replace").split("\n", 1)[0].split(",", 1)[0]
    try:
        run_tool(["ssh-keygen", "-Y", "verify", "-f", signers, "-I", principal, "-n", NAMESPACE,
                  "-s", signature], input=(directory / MANIFEST).read_bytes(),
                 what="verifying the bundle's signature", timeout=60, hint=INSTALL_HINT)
    except ToolError as exc:
        if exc.returncode == 127:
            raise
        raise BundleNotTrusted(f"manifest.json does not match its signature by {principal} "
                               "(it was changed after it was signed)", where=where,
                               hint="rebuild the bundle; never edit a built manifest") from None
    return principal


def own_principal() -> str:
    """The principal allowed_signers gives the signing key: who signed what this host just
    signed with `sign_bundle`."""
    public = signing_key().with_name(signing_key().name + ".pub").read_text().split()
    for line in trusted_signers().read_text().splitlines():
        fields = line.split()
        if len(public) > 1 and public[1] in fields and not line.lstrip().startswith("#"):
            return fields[0]
    raise ConfigError(f"the signing key is not in {allowed_signers_path()}",
                      key="allowed_signers", hint="remove the file: edgekit writes it again")


def signed_by_a_trusted_key(directory: Path) -> bool:
    """Whether `directory`'s manifest signature is by a key in allowed_signers (whether the
    manifest still matches it is verify_bundle's question)."""
    signature = directory / SIGNATURE
    if not signature.is_file():
        return False
    try:
        run_tool(["ssh-keygen", "-Y", "find-principals", "-s", signature, "-f",
                  trusted_signers()], what="finding the bundle's signer", timeout=60,
                 hint=INSTALL_HINT)
    except ToolError as exc:
        if exc.returncode == 127:
            raise
        return False
    return True


def own_key_tag() -> str:
    """A short, stable tag of the signing key (its public key's sha256)."""
    key = signing_key()
    public = key.with_name(key.name + ".pub").read_text().split()[:2]
    return hashlib.sha256(" ".join(public).encode()).hexdigest()[:12]


def signer_fingerprint(signature: Path) -> str:
    """SHA256 fingerprint of the public key inside an SSH signature (as ssh-keygen -l shows
    it), or "unreadable signature"."""
    try:
        lines = signature.read_text().strip().splitlines()
        blob = base64.b64decode("".join(lines[1:-1]))
        if not blob.startswith(b"SSHSIG"):
            raise ValueError
        (length,) = struct.unpack(">I", blob[10:14])          # after magic + uint32 version
        key = blob[14:14 + length]
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return "unreadable signature"
    (size,) = struct.unpack(">I", key[:4])
    found = key_fingerprint(f"{key[4:4 + size].decode(errors='replace')} "
                            f"{base64.b64encode(key).decode()}")
    return f"key {found}" if found else "unreadable signature"


def key_fingerprint(public: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line (`type base64 [comment]`), from
    `ssh-keygen -l` (it knows every key type OpenSSH signs with; paramiko has no sk- keys),
    or "" when ssh-keygen cannot read it."""
    try:
        shown = run_tool(["ssh-keygen", "-l", "-E", "sha256", "-f", "-"],
                         input=public.encode() + b"\n", what="fingerprinting a key",
                         timeout=60, hint=INSTALL_HINT)
    except ToolError as exc:
        if exc.returncode == 127:
            raise
        return ""
    fields = shown.stdout.decode(errors="replace").split()
    return fields[1] if len(fields) > 1 and fields[1].startswith("SHA256:") else ""


def signing_key() -> Path:
    """The private key that signs bundles (edgekit's own is created on first use)."""
    key = signing_key_path()
    if os.environ.get("EDGEKIT_SIGNING_KEY"):
        if not key.is_file() or not key.with_name(key.name + ".pub").is_file():
            raise ConfigError(f"signing key {key} (or its .pub) does not exist",
                              key="EDGEKIT_SIGNING_KEY",
                              hint="point it at a private SSH key with its .pub beside it, or "
                                   "unset it to use edgekit's own key")
        return key
    for path in (key, key.with_name(key.name + ".pub")):
        if path.exists() and not path.is_file():
            raise ConfigError(f"signing key {path} is not a file", key="signing key",
                              hint=f"move {path} away (edgekit creates its key there)")
    if not key.is_file():
        _create_key(key)
    return key


def trusted_signers() -> Path:
    """allowed_signers, created with (and always holding) the signing key's public key."""
    path = allowed_signers_path()
    key = signing_key()
    public = key.with_name(key.name + ".pub").read_text().split()
    if len(public) < 2:
        raise ConfigError(f"{key}.pub is not an SSH public key", key="EDGEKIT_SIGNING_KEY")
    text = path.read_text() if path.is_file() else ""
    if not any(public[1] in line.split() for line in text.splitlines()):
        principal = public[2] if len(public) > 2 and _PRINCIPAL.fullmatch(public[2]) \
            else _default_principal()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(("" if not text or text.endswith("\n") else "\n") +
                    f'{principal} namespaces="{NAMESPACE}" {public[0]} {public[1]}\n')
    return path


_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


def _default_principal() -> str:
    name = f"{getpass.getuser()}@{socket.gethostname()}"
    name = re.sub(r"[^A-Za-z0-9._@+-]", "-", name)
    return name if _PRINCIPAL.fullmatch(name) else "edgekit"


def _create_key(key: Path) -> None:
    """ssh-keygen an ed25519 key into a temporary folder beside `key`, then move it in (under
    a lock: two first builds at once must end with one key)."""
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(key.parent, 0o700)
    with FileLock(key.parent / ".lock", fallback_to_soft=False):
        if key.is_file():
            return
        with tempfile.TemporaryDirectory(prefix=".new-", dir=key.parent) as tmp:
            fresh = Path(tmp) / key.name
            run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                      _default_principal(), "-f", fresh],
                     what="creating edgekit's bundle signing key", timeout=60,
                     hint=INSTALL_HINT)
            os.chmod(fresh, 0o600)
            os.replace(fresh.with_name(fresh.name + ".pub"), key.with_name(key.name + ".pub"))
            os.replace(fresh, key)
        public = key.with_name(key.name + ".pub").read_text().split()
        fingerprint = key_fingerprint(" ".join(public[:2]))
        # said, not silent: a new key signs every bundle from now on, and devices trust it
        sys.stderr.write(f"edgekit: no bundle signing key yet: created {key} ({public[0]} "
                         f"{fingerprint}); bundles it signs are trusted by "
                         f"{allowed_signers_path()} and the devices you deploy to\n")
