"""Values computed from a file, computed again only when the file changed.

A fleet rollout asks the same questions of the same files for every device — the pinned host
keys, the device registry, the sha256 of bundle and runtime files — and at 10,000 devices
re-reading them was most of the controller's work (paramiko's known_hosts reader alone: 61 s
per connection). A file's stamp is one `stat`: device, inode, size, mtime and ctime; any
write changes ctime, and no user can set it, so a changed file is never answered from before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


def stamp(path: Path) -> tuple[int, ...]:
    """The file's identity and version (FileNotFoundError if there is none)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class StampedCache(Generic[T]):
    """`compute(path)` per path, kept while the file's stamp stays the same; at most `keep`
    paths (all forgotten at once past it). Safe from threads: two threads may both compute a
    value the first time, and either result is kept."""

    def __init__(self, compute: Callable[[Path], T], keep: int = 4096):
        self._compute = compute
        self._keep = keep
        self._values: dict[str, tuple[tuple[int, ...], T]] = {}

    def get(self, path: Path) -> T:
        """FileNotFoundError when the file does not exist."""
        now = stamp(path)
        key = str(path)
        known = self._values.get(key)
        if known is not None and known[0] == now:
            return known[1]
        value = self._compute(path)
        if len(self._values) >= self._keep:
            self._values.clear()
        self._values[key] = (now, value)
        return value
