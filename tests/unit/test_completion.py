"""`edgekit completion SHELL`: click's script, and what it completes — target names, registered
devices and recipe paths."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.shell_completion import ShellComplete

from edgekit.cli.main import cli
from edgekit.config.resources import recipes_dir

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def completions(*words: str) -> list[str]:
    """What click offers for the last word after the others (in this process)."""
    *args, incomplete = words
    found = ShellComplete(cli, {}, "edgekit", "_EDGEKIT_COMPLETE").get_completions(args,
                                                                                    incomplete)
    return [item.value for item in found if item.type == "plain"]


def test_bash_completes_target_r_tab_to_the_rpi_targets(tmp_path):
    # the script `edgekit completion bash` prints, run by bash as on TAB; `edgekit` on PATH is
    # this checkout
    wrapper = tmp_path / "bin" / "edgekit"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m edgekit "$@"\n')
    wrapper.chmod(0o755)
    tab = ('eval "$(edgekit completion bash)"\n'
           'COMP_WORDS=(edgekit build --recipe r.yaml --target r); COMP_CWORD=5\n'
           '_edgekit_completion edgekit\n'
           'printf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", "-c", tab], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    offered = proc.stdout.split()
    assert {"rpi4", "rpi5"} <= set(offered), proc.stdout + proc.stderr
    assert all(name.startswith("r") for name in offered)


def test_zsh_and_fish_scripts_call_back_into_edgekit():
    for shell in ("zsh", "fish"):
        from click.testing import CliRunner
        result = CliRunner().invoke(cli, ["completion", shell])
        assert result.exit_code == 0 and "_EDGEKIT_COMPLETE" in result.output
        assert f"{shell}_complete" in result.output


def test_registered_device_names_complete_wherever_a_device_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    from edgekit.config.devices import DeviceEntry, save_registry
    save_registry({name: DeviceEntry(name=name, address=f"pi@10.0.0.{i}:22", identity="k")
                   for i, name in enumerate(["lab-aarch64-1", "lab-x86_64-1", "kitchen-pi"])})
    assert completions("probe", "lab-") == ["lab-aarch64-1", "lab-x86_64-1"]
    assert completions("deploy", "b", "--host", "k") == ["kitchen-pi"]
    assert completions("bench", "run", "kitchen-pi", "lab-x") == ["lab-x86_64-1"]


def test_target_names_complete_and_a_path_is_left_to_the_shell():
    assert completions("targets", "show", "ethos") == ["ethos-u55-128", "ethos-u85-256"]
    assert completions("deploy", "--target", "rk") == ["rk3588-cpu", "rk3588-gpu", "rk3588-npu"]
    assert completions("build", "--target", "targets/my") == []   # a file, for the shell


def test_recipe_paths_complete_with_the_shipped_examples():
    shipped = str(recipes_dir() / "kws")
    assert completions("build", "--recipe", shipped) == [str(recipes_dir() / "kws_mlp.yaml")]


def test_app_names_complete_from_the_bundles_built_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for folder, app in [("kws-mlp-rpi4", "kws-mlp"), ("kws-mlp-host", "kws-mlp"),
                        ("mobilenet-v2-host", "mobilenet-v2")]:
        (tmp_path / "build" / folder).mkdir(parents=True)
        (tmp_path / "build" / folder / "manifest.json").write_text(f'{{"app": "{app}"}}')
    (tmp_path / "build" / "broken").mkdir()
    (tmp_path / "build" / "broken" / "manifest.json").write_text("{not json")
    assert completions("releases", "pi-1", "--app", "k") == ["kws-mlp"]
    assert completions("bench", "history", "--app", "") == ["kws-mlp", "mobilenet-v2"]
    assert completions("fleet", "status", "--app", "m") == ["mobilenet-v2"]
