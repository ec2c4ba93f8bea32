"""The NPU tier uses the NPU toolchains' venvs where `edgekit toolchains install npu` put them
(the session's own build cache, tests/conftest.py, would hide them)."""

import os
from pathlib import Path

import pytest

# read at import, before the session fixture points EDGEKIT_CACHE_DIR at a temporary cache
TOOLCHAINS = os.environ.get("EDGEKIT_TOOLCHAINS_DIR") or str(
    Path(os.environ.get("EDGEKIT_CACHE_DIR") or Path.home() / ".cache" / "edgekit")
    / "toolchains")


@pytest.fixture(scope="session", autouse=True)
def npu_toolchains():
    saved = os.environ.get("EDGEKIT_TOOLCHAINS_DIR")
    os.environ["EDGEKIT_TOOLCHAINS_DIR"] = TOOLCHAINS
    yield
    if saved is None:
        os.environ.pop("EDGEKIT_TOOLCHAINS_DIR", None)
    else:
        os.environ["EDGEKIT_TOOLCHAINS_DIR"] = saved
