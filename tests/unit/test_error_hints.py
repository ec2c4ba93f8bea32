"""Mistakes a user makes on purpose (issue 40): each answers in one line, with a hint that
leads to the fix, and README's exit code."""

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgekit.cli.main import cli, interrupted
from edgekit.errors import BundleError, ConfigError, Interrupted

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def run(*argv: str):
    return CliRunner().invoke(cli, list(argv))


def one_line_and_hint(output: str) -> tuple[str, str]:
    lines = [line for line in output.splitlines() if not line.startswith("edgekit: ")]
    assert len(lines) == 2 and lines[1].startswith("  hint: "), output
    assert "Traceback" not in output
    return lines[0], lines[1]


def test_a_misspelt_target_is_answered_with_the_closest_name():
    result = run("targets", "show", "rpi-4")
    assert result.exit_code == ConfigError.exit_code == 2
    error, hint = one_line_and_hint(result.output)
    assert error == "error: target: unknown target 'rpi-4'"
    assert hint.startswith("  hint: did you mean 'rpi4'? expected one of: ")
    assert "did you mean 'rpi5'" in run("targets", "show", "RPI5").output


def test_validating_a_directory_that_does_not_exist_says_so(tmp_path):
    result = run("validate", str(tmp_path / "nodir"))
    assert result.exit_code == BundleError.exit_code == 6
    error, hint = one_line_and_hint(result.output)
    assert error == f"error: {tmp_path / 'nodir'}: no such bundle: the path does not exist"
    assert "manifest.json" not in result.output and "edgekit build" in hint


def test_deploying_a_tar_that_was_never_written_names_the_directory_build_wrote(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))
    (tmp_path / "build" / "kws-mlp-rpi4").mkdir(parents=True)
    # the bundle is checked before the device's name (no device is registered here)
    result = run("deploy", "build/kws-mlp-rpi4.tar", "--host", "lab-aarch64-1")
    assert result.exit_code == 6
    error, hint = one_line_and_hint(result.output)
    assert error == "error: build/kws-mlp-rpi4.tar: no such bundle: the path does not exist"
    assert "writes the directory build/kws-mlp-rpi4 (a .tar only with --tar)" in hint
    other = run("deploy", "build/x.tar", "--host", "lab-aarch64-1")
    assert other.exit_code == 6 and "--tar" in one_line_and_hint(other.output)[1]


def test_a_relative_recipe_path_that_is_not_there_names_the_directory_and_the_examples(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("build", "--recipe", "recipes/kws-mlp.yaml", "--target", "rpi4")
    assert result.exit_code == 2
    error, hint = one_line_and_hint(result.output)
    assert error == "error: recipes/kws-mlp.yaml: recipe file not found"
    assert f"read from the working directory, {tmp_path};" in hint
    from edgekit.config.resources import recipes_dir
    assert f"did you mean {recipes_dir() / 'kws_mlp.yaml'}? " in hint
    assert hint.endswith(f"the example recipes come with edgekit in {recipes_dir()}")


def test_a_recipe_shape_the_onnx_model_contradicts_names_the_shape_it_expects(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.onnx import OnnxFrontend
    shape = ["batch", 3, 8]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]),
              tmp_path / "m.onnx")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: {onnx: m.onnx}\ninputs:\n  - {name: x, shape: [1, 8, 3]}\n")
    with pytest.raises(ConfigError) as err:
        OnnxFrontend().load(load_recipe(recipe))
    assert err.value.exit_code == 2 and err.value.key == "inputs[0].shape"
    assert err.value.what == "input 'x' has shape [1, 8, 3] here, but the model expects " \
                             "[batch, 3, 8]"
    assert "fit [batch, 3, 8]" in err.value.hint
    recipe.write_text("model: {onnx: m.onnx}\ninputs:\n  - {name: x, shape: [4, 3, 8]}\n")
    assert OnnxFrontend().load(load_recipe(recipe)).samples[0].shape == (4, 3, 8)


def test_a_recipe_shape_a_pytorch_model_fails_on_names_its_factorys_example(tmp_path):
    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.torch import TorchFrontend
    recipe = tmp_path / "kws.yaml"
    recipe.write_text("model: {python: 'edgekit.examples.models:kws_mlp'}\n"
                      "inputs:\n  - {name: mfcc, shape: [1, 40, 10]}\n")
    loaded = load_recipe(recipe)
    frontend = TorchFrontend()
    with pytest.raises(ConfigError) as err:
        frontend.export(loaded, frontend.load(loaded))
    assert err.value.exit_code == 2 and err.value.key == "inputs"
    assert "the model fails on the recipe's inputs (mfcc [1, 40, 10] float32)" in err.value.what
    assert err.value.hint.startswith("its factory's example input: [1, 49, 10] float32; ")


def test_ctrl_c_says_whether_a_step_that_changes_a_device_was_in_flight():
    nothing = interrupted(None, "rollback")
    assert nothing.exit_code == Interrupted.exit_code == 130
    assert str(nothing) == "nothing was changed on a device"
    during = interrupted(("the deploy's upload step on pi@10.0.0.7", "see releases"), "deploy")
    assert str(during) == "the deploy's upload step on pi@10.0.0.7 was in flight\n" \
                          "  hint: see releases"
    # a command that does not say when it starts changing a device claims nothing
    assert "may have been changing a device" in str(interrupted(None, "tune"))


def test_ctrl_c_while_connecting_exits_130_in_one_line_and_nothing_changed(tmp_path):
    # a port that accepts and never speaks SSH: the rollback waits for its banner
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    env = {**os.environ, "EDGEKIT_HOME": str(tmp_path / "home"), "EDGEKIT_PROGRESS": "lines",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "edgekit", "rollback",
                             f"u@127.0.0.1:{server.getsockname()[1]}", "--app", "kws",
                             "--identity", str(key)],
                            stderr=subprocess.PIPE, text=True, env=env,
                            # as a terminal starts it: a run in the background (`cmd &` in a
                            # script) hands its children SIGINT ignored, and Ctrl-C then is none
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr.readline().startswith("edgekit: connecting to u@127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(timeout=30) == 130, rest
    finally:
        proc.kill()
        server.close()
    said = [line for line in rest.splitlines() if not line.startswith("edgekit: ")]
    assert said == ["interrupted: nothing was changed on a device"], rest
