"""Where edgekit keeps its state on the host.

$EDGEKIT_HOME (default ~/.config/edgekit): pinned host keys, lab devices and their keys, logs of
unexpected errors.
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
