"""What `import edgekit` and `edgekit.config` offer a Python user: the names `__all__` lists,
and a documented example that does what it says."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import edgekit.config
from edgekit.compile.settings import resolve_settings


def test_import_edgekit_offers_only_its_public_names():
    # a fresh interpreter: other tests' imports add submodules (edgekit.config, …) as attributes
    code = ("import edgekit; print(sorted(n for n in vars(edgekit) if not n.startswith('_')));"
            "print(sorted(n for n in dir(edgekit) if not n.startswith('_')))")
    root = str(Path(edgekit.__file__).resolve().parents[1])     # this checkout's edgekit
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": root})
    in_namespace, in_dir = done.stdout.splitlines()
    assert in_namespace == "[]"         # no `annotations`, no `importlib`
    assert in_dir == str(sorted(edgekit.__all__))
    assert "build" in edgekit.__all__ and "annotations" not in edgekit.__all__


def test_the_config_modules_example_sets_what_a_compile_uses(monkeypatch):
    for name in edgekit.config.COMPILE_SETTINGS:       # restored after the test
        monkeypatch.setattr(edgekit.config, name, getattr(edgekit.config, name))
    doc = edgekit.config.__doc__
    example = textwrap.dedent(doc.split("::\n\n", 1)[1].split("\n\n", 1)[0])
    assert "edgekit.config." in example
    exec(example, {})
    settings = resolve_settings(None)
    assert (settings.target, settings.device) == ("rpi4", "lab-aarch64-1")
    assert edgekit.config.profiles.__name__ == "edgekit.config.profiles"   # still the module
