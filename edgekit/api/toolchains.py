"""`edgekit toolchains …`: the optional NPU compilers, each in its own venv under the cache."""

from __future__ import annotations

from collections.abc import Callable


def install(group: str, accept_licence: bool = False,
            progress: Callable[[str], None] = lambda _: None) -> list[dict]:
    """Install GROUP's toolchains (npu, rknn); installed venvs are kept. Returns each
    toolchain's row as `installed()` gives it."""
    from edgekit.toolchain.venvs import install as run_install
    chains = run_install(group, accept_licence=accept_licence, progress=progress)
    names = {c.name for c in chains}
    return [row for row in installed() if row["name"] in names]


def installed() -> list[dict]:
    """Each optional toolchain: installed or not, where, its versions, its main packages and
    the command that installs it."""
    from edgekit.toolchain.venvs import TOOLCHAINS, install_command, versions
    return [{"name": t.name, "purpose": t.purpose, "installed": t.installed(),
             "directory": str(t.directory()),
             "versions": versions(t.name) if t.installed() else {},
             "main_packages": list(t.main_packages()),
             "install_command": install_command(t.name)} for t in TOOLCHAINS.values()]


__all__ = ["install", "installed"]
