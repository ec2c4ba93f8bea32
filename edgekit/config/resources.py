"""The data edgekit ships: target profiles, example recipes and the runtime shims.

They live at the top of the repository (targets/, recipes/, runtime_shims/), where users edit
them. edgekit/_data/ links to those directories, so an editable install reads them in place,
and a wheel carries copies of them (pyproject.toml's package-data). Every lookup goes through
here.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def targets_dir() -> Path:
    """The built-in target profiles (*.yaml)."""
    return _data("targets")


def recipes_dir() -> Path:
    """The example recipes (*.yaml)."""
    return _data("recipes")


def shims_dir() -> Path:
    """The shell scripts edgekit runs on devices (run.sh, probe.sh, …)."""
    return _data("runtime_shims")


def _data(name: str) -> Path:
    # pip installs edgekit as files (never a zip), so the resource is a directory on disk
    return Path(str(files("edgekit") / "_data" / name))
