"""Where edgekit keeps its state on the host.

$EDGEKIT_HOME (default ~/.config/edgekit): pinned host keys, lab devices and their keys, logs of
unexpected errors, the key that signs bundles (keys/) and the signers whose bundles are trusted
(allowed_signers).
$EDGEKIT_CACHE_DIR (default ~/.cache/edgekit): builds, runtime tools, the arm64 rootfs.
"""

from __future__ import annotations

import os
from pathlib import Path


def edgekit_home() -> Path:
    env = os.environ.get("EDGEKIT_HOME")
    return Path(env) if env else Path.home() / ".config" / "edgekit"


def cache_root() -> Path:
    env = os.environ.get("EDGEKIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgekit"


def known_hosts_path() -> Path:
    return edgekit_home() / "known_hosts"


def logs_dir() -> Path:
    """Tracebacks of unexpected errors, one file each (the CLI prints the path)."""
    return edgekit_home() / "logs"


def signing_key_path() -> Path:
    """The private SSH key that signs bundles: $EDGEKIT_SIGNING_KEY (the user's own key, e.g.
    ~/.ssh/id_ed25519, with its .pub beside it), else edgekit's own key in $EDGEKIT_HOME/keys/
    (an ed25519 key created on first use)."""
    env = os.environ.get("EDGEKIT_SIGNING_KEY")
    return Path(env).expanduser() if env else edgekit_home() / "keys" / "bundle_ed25519"


def allowed_signers_path() -> Path:
    """OpenSSH allowed_signers: the keys whose signed bundles deploy (the signing key's own is
    added on first use). Uploaded to each device as ~/.edgekit/allowed_signers."""
    env = os.environ.get("EDGEKIT_ALLOWED_SIGNERS")
    return Path(env).expanduser() if env else edgekit_home() / "allowed_signers"
