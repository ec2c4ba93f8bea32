"""Where edgekit keeps its state on the host.

$EDGEKIT_HOME (default ~/.config/edgekit): pinned host keys, lab devices and their keys, logs of
unexpected errors, fleet journals (which hold hook commands), benchmark history, the key that
signs bundles (keys/) and the signers whose bundles are trusted (allowed_signers). It is
private: created 0700, and a home left group/world-accessible by an older edgekit is tightened
(it and everything in it lose their group and other bits) the first time a process uses it.
$EDGEKIT_CACHE_DIR (default ~/.cache/edgekit): builds, runtime tools, the arm64 rootfs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edgekit.errors import ConfigError

_PRIVATE = 0o700
_checked: set[Path] = set()


def edgekit_home() -> Path:
    """$EDGEKIT_HOME, made private (see the module doc) once per process."""
    env = os.environ.get("EDGEKIT_HOME")
    home = Path(env) if env else Path.home() / ".config" / "edgekit"
    if home not in _checked:
        if private_dir(home):
            _tighten_tree(home)
        _checked.add(home)
    return home


def private_dir(path: Path) -> bool:
    """Make `path` a directory only its owner can use: created 0700, an existing one of ours
    with group/other bits tightened. True when it had to be tightened."""
    try:
        path.mkdir(mode=_PRIVATE, parents=True, exist_ok=True)
        info = path.stat()
        if info.st_uid != os.getuid() or not info.st_mode & 0o077:
            return False
        path.chmod(stat.S_IMODE(info.st_mode) & _PRIVATE)
        return True
    except OSError as exc:
        raise ConfigError(f"cannot make a private directory: {exc.strerror or exc}",
                          where=str(path),
                          hint="set EDGEKIT_HOME to a directory you own and can write") from None


def _tighten_tree(root: Path) -> None:
    """Drop group/other bits from what an older edgekit left readable under `root`."""
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            try:
                info = path.lstat()
                if (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)) and \
                        info.st_uid == os.getuid() and info.st_mode & 0o077:
                    path.chmod(stat.S_IMODE(info.st_mode) & _PRIVATE)
            except OSError:
                continue  # vanished meanwhile, or not ours to change: the 0700 home covers it


def cache_root() -> Path:
    env = os.environ.get("EDGEKIT_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "edgekit"


def known_hosts_path() -> Path:
    return edgekit_home() / "known_hosts"


def logs_dir() -> Path:
    """Tracebacks of unexpected errors, one file each (the CLI prints the path)."""
    logs = edgekit_home() / "logs"
    private_dir(logs)
    return logs


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
