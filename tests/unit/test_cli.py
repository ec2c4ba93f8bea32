"""The CLI's shell: what it imports before a command runs, and how it reports errors."""

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "torch_mlir", "iree.compiler", "onnx", "onnxruntime", "numpy")

RUN_MAIN = """
import json, sys
argv, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
from edgekit.cli.main import main
sys.argv = ["edgekit", *argv]
try:
    main()
except SystemExit:
    pass
print(json.dumps([m for m in heavy if m in sys.modules]), file=sys.stderr)
"""


def edgekit(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["targets", "list"],
    ["devices", "list"],
    ["releases", "nobody@127.0.0.9:1", "--app", "x"],  # fails: no key, no device; imports count
    ["lab", "status"],
], ids=" ".join)
def test_commands_that_build_nothing_import_no_compiler(argv):
    proc = subprocess.run([sys.executable, "-c", RUN_MAIN, json.dumps(argv), json.dumps(HEAVY)],
                          capture_output=True, text=True, timeout=120)
    imported = json.loads(proc.stderr.strip().splitlines()[-1])
    assert imported == [], f"`edgekit {' '.join(argv)}` imported {imported}"


def test_an_unexpected_error_is_one_line_and_a_log_with_the_traceback(tmp_path):
    (tmp_path / "devices.json").write_text("{not json")  # a state file cut short
    proc = edgekit("devices", "list", env={"EDGEKIT_HOME": str(tmp_path)})
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: json.decoder.JSONDecodeError: Expecting property name")
    assert "Traceback" not in proc.stderr
    logs = list((tmp_path / "logs").iterdir())
    assert len(logs) == 1 and f"traceback: {logs[0]}" in proc.stderr
    assert "rerun with --debug for the traceback" in proc.stderr
    log = logs[0].read_text()
    assert "devices list" in log and "Traceback (most recent call last)" in log
    assert "in load_registry" in log


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_prints_the_traceback_of_an_unexpected_error(tmp_path, how):
    (tmp_path / "devices.json").write_text("{not json")
    env = {"EDGEKIT_HOME": str(tmp_path)}
    if how == "flag":
        proc = edgekit("--debug", "devices", "list", env=env)
    else:
        proc = edgekit("devices", "list", env={**env, "EDGEKIT_DEBUG": "1"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: json.decoder.JSONDecodeError")
    assert "Traceback (most recent call last)" in proc.stderr and "in load_registry" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_an_edgekit_error_is_its_message_and_with_debug_also_the_traceback():
    plain = edgekit("bench", "compare", "no-such-id", "other-id")
    assert plain.returncode == 2
    assert "no benchmark result 'no-such-id'" in plain.stderr
    assert "Traceback" not in plain.stderr and "--debug" not in plain.stderr
    debug = edgekit("--debug", "bench", "compare", "no-such-id", "other-id")
    assert debug.returncode == 2
    assert debug.stderr.startswith(plain.stderr.rstrip("\n"))
    assert "Traceback (most recent call last)" in debug.stderr
    assert "edgekit.errors.ConfigError" in debug.stderr


def test_python_dash_m_edgekit_is_the_edgekit_command():
    via_module = subprocess.run([sys.executable, "-m", "edgekit", "targets", "list", "--json"],
                                capture_output=True, text=True, timeout=120)
    via_cli = edgekit("targets", "list", "--json")
    assert via_module.returncode == 0, via_module.stderr
    assert json.loads(via_module.stdout) == json.loads(via_cli.stdout)
    wrong = subprocess.run([sys.executable, "-m", "edgekit", "no-such-command"],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "No such command" in wrong.stderr
