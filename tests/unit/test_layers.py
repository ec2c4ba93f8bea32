"""The package layers (pyproject.toml's [tool.importlinter]) hold: no package imports one
above it, so there are no cycles between packages and the device layer never sees a recipe."""

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_imports_only_the_layers_below_it(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
