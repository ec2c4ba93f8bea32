"""Publishing a bundle where other edgekit processes may read it (`build/<app>-<target>`).

Two builds or deploys from one working directory share that folder. A bundle is therefore
published whole: prepared in a private directory beside it, then put in place by rename(2)
under an exclusive lock on `.<name>.lock` next to it; a deploy of a published bundle copies it
under the shared lock, so it ships one whole bundle that no later build can change underneath
the upload. (Measured before: 3 of 3 concurrent deploys of one recipe failed with a false
sha256 mismatch or journaled a good release as rejected.)

The lock is flock(2) itself, not filelock (which edgekit's other locks use): it needs a shared
mode, and filelock's only reader/writer lock is an SQLite database, which a reader must be able
to write beside the bundle.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def output_lock(out: Path, *, shared: bool) -> Iterator[None]:
    """The lock publishers of `out` take exclusively and readers shared. A reader in a place
    it cannot write (a read-only bundle) goes without: no edgekit publishes there."""
    lock = out.parent / f".{out.name}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        if not shared:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def staging_dir(out: Path) -> Path:
    """A private directory on `out`'s filesystem to prepare the next `out` in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))


def publish(staging: Path, out: Path) -> None:
    """Put the complete directory `staging` (from :func:`staging_dir`) at `out`."""
    with output_lock(out, shared=False):
        if out.exists() or out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
            out.rename(old / out.name)
            staging.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out)


def private_copy(bundle_dir: Path) -> Path:
    """A copy of a published bundle directory, taken whole under its lock, that nothing else
    writes to; symlinks stay symlinks (the bundle checks refuse them). The caller removes
    the returned directory's parent."""
    copy = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")) / bundle_dir.name
    with output_lock(bundle_dir, shared=True):
        shutil.copytree(bundle_dir, copy, symlinks=True)
    return copy
