"""Versions of the toolchain pieces; part of every build cache key and manifest."""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path


@functools.cache
def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not-installed"


def iree_compiler_version() -> str:
    return package_version("iree-base-compiler")


def iree_runtime_version() -> str:
    return package_version("iree-base-runtime")


def toolchain_versions() -> dict[str, str]:
    return {name: package_version(name) for name in
            ("edgekit", "torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime")}


@functools.cache
def edgekit_code_digest() -> str:
    """sha256 of edgekit's own sources (~200 files, a few ms once per process). Part of the
    build and source keys: an edited checkout or an upgrade without a version bump is another
    toolchain, so a rewrite changed in place never answers from bundles the old code built."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()
