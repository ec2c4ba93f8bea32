"""A toolchain venv counts as installed only when its marker records the current pins."""

import json

import pytest

from edgekit.errors import ToolchainMissing
from edgekit.toolchain import venvs


@pytest.fixture(autouse=True)
def no_shared_toolchains(tmp_path, monkeypatch):
    """This machine's shared venvs (.ci/setup.sh installs them) stay out of these tests."""
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "no-shared"))


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


def test_the_toolchains_list_fits_80_columns_with_whole_names(tmp_path, monkeypatch):
    import io

    from click.testing import CliRunner
    from rich.console import Console

    from edgekit.cli import render
    from edgekit.cli.main import cli
    monkeypatch.setenv("EDGEKIT_TOOLCHAINS_DIR", str(tmp_path))
    marker(tmp_path, "tosa", dict(p.split("==") for p in venvs.toolchain("tosa").packages))
    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=80, color_system=None))
    assert CliRunner().invoke(cli, ["toolchains", "list"]).exit_code == 0
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    names = [line.split()[0] for line in text.splitlines()[3:] if line[:2].strip()]
    assert names == ["executorch", "tosa", "rknn"], text
    assert "installed: tosa-tools 2026.8.0" in text and "missing: edgekit toolchains" in text


def pins(name):
    chain = venvs.toolchain(name)
    return dict(p.split("==") for p in chain.packages + chain.no_deps)


def test_the_users_own_venv_comes_before_the_machines_shared_one(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEKIT_TOOLCHAINS_DIR", raising=False)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "shared"))
    marker(tmp_path / "shared", "tosa", pins("tosa"))
    assert venvs.python_of("tosa") == tmp_path / "shared" / "tosa" / "bin" / "python"
    marker(tmp_path / "cache" / "toolchains", "tosa", pins("tosa"))
    assert venvs.python_of("tosa") == tmp_path / "cache" / "toolchains" / "tosa" / "bin" / "python"


def test_a_shared_venv_made_for_older_pins_gives_way_to_an_install_for_the_user(tmp_path,
                                                                                 monkeypatch):
    monkeypatch.delenv("EDGEKIT_TOOLCHAINS_DIR", raising=False)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "shared"))
    marker(tmp_path / "shared", "executorch", {"executorch": "1.5.1"})
    chain = venvs.toolchain("executorch")
    assert not chain.installed()
    assert chain.directory() == tmp_path / "cache" / "toolchains" / "executorch"   # never /opt


def test_edgekit_toolchains_dir_takes_the_users_cache_place_before_the_shared_folder(
        tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_TOOLCHAINS_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "shared"))
    assert venvs.search_roots() == (tmp_path / "mine", tmp_path / "shared")
    assert venvs.toolchains_root() == tmp_path / "mine"          # where `install` puts them
    monkeypatch.delenv("EDGEKIT_SHARED_TOOLCHAINS_DIR")
    assert venvs.search_roots() == (tmp_path / "mine", venvs.SHARED)
    assert str(venvs.SHARED) == "/opt/edgekit/toolchains"        # where .ci/setup.sh puts them


def test_a_missing_toolchain_names_where_it_looked_and_the_command_that_installs_it(
        tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEKIT_TOOLCHAINS_DIR", raising=False)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "shared"))
    with pytest.raises(ToolchainMissing) as err:
        venvs.python_of("executorch")
    assert err.value.exit_code == 5
    assert f"looked in {tmp_path / 'cache' / 'toolchains'} or {tmp_path / 'shared'}" \
        in str(err.value)
    assert err.value.hint.startswith("run `edgekit toolchains install npu`")
    assert str(tmp_path / "cache" / "toolchains") in err.value.hint
