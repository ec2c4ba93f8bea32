"""Content-addressed build cache: the same model + recipe + target + toolchain → same bundle.

The key is a sha256 over a canonical JSON of everything that affects the bundle; the entry is
the finished bundle directory, stored atomically (moved in under a temporary name, then renamed).
A build works in a folder on the cache's filesystem (`workdir`), so storing its fresh bundle is
a rename, not a copy: the one copy a build makes is the published one (hit.py).
Location: $EDGEKIT_CACHE_DIR, else ~/.cache/edgekit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.models.bundle import MANIFEST


def cache_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


class BuildCache:
    def __init__(self, root: Path | None = None):
        self.root = (root or cache_root()) / "builds"

    def lookup(self, key: str) -> Path | None:
        entry = self.root / key
        return entry if (entry / MANIFEST).is_file() else None

    def workdir(self) -> Path:
        """A new private folder for a build, on the cache's filesystem (removed by the build;
        one a killed build left is under <cache>/work). Where this user cannot write there (a
        cache another user set up), the system's temporary folder: `store` then copies."""
        try:
            work = self.root.parent / "work"
            work.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="edgekit-build-", dir=work))
        except OSError:
            return Path(tempfile.mkdtemp(prefix="edgekit-build-"))

    def store(self, key: str, bundle_dir: Path, replace: bool = False) -> Path:
        """Store a bundle under `key`, consuming `bundle_dir` (moved in by rename when it is
        on the cache's filesystem, as a build's `workdir` is; copied otherwise); `replace` (a
        build that bypassed the cache) swaps out an existing entry, so the fresh build is what
        gets published."""
        self.root.mkdir(parents=True, exist_ok=True)
        entry = self.root / key
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.root))
        try:
            os.rename(bundle_dir, staging)        # staging is empty: rename replaces it
        except OSError:                           # another filesystem
            shutil.copytree(bundle_dir, staging, dirs_exist_ok=True)
            shutil.rmtree(bundle_dir, ignore_errors=True)
        if replace and entry.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-old-", dir=self.root))
            entry.rename(old / "entry")
            shutil.rmtree(old, ignore_errors=True)
        try:
            staging.rename(entry)
        except OSError:  # another build stored the same key first: identical content
            shutil.rmtree(staging, ignore_errors=True)
        return entry
