"""A tuned per-dispatch configuration set on disk: `<executable>.mlir` files named by the
sha256 of their content (tune/dispatch_configs.py makes them), kept in
$EDGEKIT_HOME/tuning/dispatch-configs/<sha256>/ and copied into every bundle built with it
(`dispatch-configs/<executable>.mlir`, listed in the manifest like any payload file). So a
bundle carries what rebuilding it needs: `edgekit bisect --bundle`, or a build on another
machine whose home lacks the set, restores it from the bundle after checking its digest.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from pathlib import Path

from edgekit.config.paths import edgekit_home
from edgekit.errors import BundleError

SUBSTITUTE = "--iree-hal-substitute-executable-configurations-from="
_DIGEST = re.compile(r"[0-9a-f]{64}")


def root() -> Path:
    return edgekit_home() / "tuning" / "dispatch-configs"


def set_digest(files: dict[str, str]) -> str:
    """The content digest of a set of substitutions {executable: source}: names and texts."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()


def read_set(directory: Path) -> dict[str, str]:
    """{executable: source} of the `.mlir` files in `directory`."""
    return {p.stem: p.read_text() for p in sorted(directory.glob("*.mlir"))}


def digest_of_flags(flags: tuple[str, ...]) -> str | None:
    """The digest of the edgekit set that iree-compile flags substitute (None: none, or a
    directory that is not one of edgekit's sets)."""
    for flag in flags:
        if flag.startswith(SUBSTITUTE):
            directory = Path(flag[len(SUBSTITUTE):])
            if _DIGEST.fullmatch(directory.name) and directory.parent.name == "dispatch-configs":
                return directory.name
    return None


def restore(digest: str, files: dict[str, str], where: str) -> Path:
    """Put the set `files` into this home as `digest` (unless there already), after checking
    that it is that set: a bundle's copy that was edited is refused, not used."""
    if set_digest(files) != digest:
        raise BundleError(f"the bundle's dispatch configurations do not match their digest "
                          f"{digest[:12]}…", where=where,
                          hint="the bundle was modified after it was built; rebuild it")
    target = root() / digest
    if target.is_dir() and set_digest(read_set(target)) == digest:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=target.parent))
    for name, source in files.items():
        (staging / f"{name}.mlir").write_text(source)
    shutil.rmtree(target, ignore_errors=True)     # a damaged copy: replaced whole
    staging.replace(target)
    return target


__all__ = ["root", "set_digest", "read_set", "digest_of_flags", "restore", "SUBSTITUTE"]
