"""Versions of the toolchain pieces; part of every build cache key and manifest."""

from __future__ import annotations

import functools
from importlib import metadata


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
