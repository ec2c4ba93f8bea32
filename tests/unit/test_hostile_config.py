"""Hostile config files: code-running YAML tags, object arrays, alias bombs and junk are refused
with one line naming file:line and exit 2, never a traceback (issue 17, item 11)."""

import subprocess
import textwrap

import numpy as np
import pytest

from edgekit.config.fleet import load_fleet
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.config.yamlsrc import MAX_NODES
from edgekit.errors import ConfigError
from edgekit.pipeline.load import sample_inputs
from tests.fixtures.cli import edgekit_here

PYTHON_OBJECT = "!!python/object/apply:os.system ['touch pwned']"


def edgekit(*args: str, cwd) -> subprocess.CompletedProcess:
    return edgekit_here(*args, cwd=cwd)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    """Exit `code`, stderr one `error:` line (plus a `hint:` line at most), no traceback."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == code, proc.stderr
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert all(ln.startswith("  hint: ") for ln in lines[1:]), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], proc.stderr


@pytest.mark.parametrize("kind", ["recipe", "target", "fleet"])
def test_a_python_object_tag_is_refused_with_its_line_and_exit_2(tmp_path, kind):
    files = {
        "recipe": ("recipe.yaml", f"name: demo\nmodel: {PYTHON_OBJECT}\n",
                   ["build", "--recipe", "recipe.yaml", "--target", "host"]),
        "target": ("evil.yaml", f"arch: x86_64\nbackend: {PYTHON_OBJECT}\n",
                   ["targets", "show", "./evil.yaml"]),
        "fleet": ("fleet.yaml", f"devices:\n  d1: {PYTHON_OBJECT}\n",
                  ["fleet", "status", "--fleet", "fleet.yaml", "--app", "demo"]),
    }
    name, text, argv = files[kind]
    (tmp_path / name).write_text(text)
    load = {"recipe": load_recipe, "target": load_target, "fleet": load_fleet}[kind]
    with pytest.raises(ConfigError) as err:
        load(str(tmp_path / name))
    assert err.value.where == f"{tmp_path / name}:2"
    assert "!!python/object/apply:os.system" in err.value.what
    proc = edgekit(*argv, cwd=tmp_path)
    assert_one_line_error(proc, 2, f"{name}:2", "is not allowed")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("text, message", [
    ("model: !foo bar\n", "YAML tag '!foo' is not allowed"),
    ("? [a, b]\n: 1\n", "a key must be a plain value"),
    ("seed: !!int abc\n", "invalid YAML value"),
    ("seed: " + "9" * 5000 + "\n", "invalid YAML value"),
    ("model: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("a: \x07\n", "invalid YAML"),
    ('model: {python: "m:f"}\n"bad\\nkey": 1\n', "unknown key"),
])
def test_yaml_that_is_not_plain_data_is_one_line(tmp_path, text, message):
    (tmp_path / "r.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_recipe(tmp_path / "r.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value).split("\n  hint: ")[0]


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} values"):
        load_fleet(tmp_path / "bomb.yaml")


def test_an_object_array_in_the_samples_npz_is_a_config_error(tmp_path):
    np.savez(tmp_path / "samples.npz", x=np.array([object(), 1], dtype=object))
    (tmp_path / "r.yaml").write_text(textwrap.dedent("""
        model: {python: "m:f"}
        samples: samples.npz
    """))
    recipe = load_recipe(tmp_path / "r.yaml")
    with pytest.raises(ConfigError) as err:
        sample_inputs(recipe, None)
    assert err.value.exit_code == 2 and err.value.key == "samples"
    assert "object array" in err.value.what
