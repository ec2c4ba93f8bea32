"""A toolchain venv counts as installed only when its marker records the current pins."""

import json

import pytest

from edgekit.errors import ToolchainMissing
from edgekit.toolchain import venvs


def marker(root, name, versions):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / venvs.MARKER).write_text(json.dumps({"name": name, "versions": versions}))


def test_a_venv_made_for_older_pins_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_TOOLCHAINS_DIR", str(tmp_path))
    marker(tmp_path, "executorch", {"executorch": "1.5.1"})       # before tosa-tools was pinned
    assert not venvs.toolchain("executorch").installed()
    with pytest.raises(ToolchainMissing, match="executorch") as err:
        venvs.python_of("executorch")
    assert "edgekit toolchains install npu" in err.value.hint


def test_a_venv_with_every_pin_is_installed_and_gives_its_versions(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_TOOLCHAINS_DIR", str(tmp_path))
    pins = dict(p.split("==") for p in venvs.toolchain("tosa").packages)
    marker(tmp_path, "tosa", pins)
    assert venvs.toolchain("tosa").installed()
    assert venvs.versions("tosa") == pins
