"""The CLI's house (issues 39 and 40): every command reaches edgekit through edgekit.api (an
import-linter contract), its modules load when their command runs, every command takes
--json and says its errors as JSON under it, and -q/-v set how much progress is shown."""

import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from click.utils import make_default_short_help

from edgekit.cli import render
from edgekit.cli.main import COMMANDS, cli, load_command

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


def every_command(group: click.Group = cli, path: tuple[str, ...] = ()):
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if isinstance(command, click.Group):
            yield from every_command(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGEKIT_PROGRESS", "lines")
    yield tmp_path
    render.set_verbosity(0)


def test_the_cli_contract_forbids_every_edgekit_package_but_api_models_config_errors():
    """A package added later is forbidden to the CLI too (the contract lists them all)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in config["contracts"] if c.get("source_modules") == ["edgekit.cli"])
    assert contract["type"] == "forbidden"
    packages = {p.name for p in (ROOT / "edgekit").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()} | \
        {p.stem for p in (ROOT / "edgekit").glob("*.py")}
    allowed = {"cli", "api", "models", "config", "errors", "__init__", "__main__"}
    assert {f"edgekit.{p}" for p in packages - allowed} == \
        {m for m in contract["forbidden_modules"] if m.startswith("edgekit.")}
    assert "torch" in contract["forbidden_modules"]   # `edgekit --help` never loads it


def test_importing_the_cli_or_asking_for_help_loads_no_command_module_and_no_torch():
    probe = ("import sys\n"
             "from click.testing import CliRunner\n"
             "import edgekit.cli.main as m\n"
             "loaded = lambda: sorted(n for n in sys.modules if n.startswith('edgekit.cli.')"
             " and n not in ('edgekit.cli.main', 'edgekit.cli.render', 'edgekit.cli.common'))\n"
             "print(loaded(), 'torch' in sys.modules)\n"
             "assert CliRunner().invoke(m.cli, ['--help']).exit_code == 0\n"
             "print(loaded(), 'torch' in sys.modules)\n"
             "assert CliRunner().invoke(m.cli, ['tune', '--help']).exit_code == 0\n"
             "print(loaded(), 'torch' in sys.modules, 'edgekit.api.tune' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    imported, helped, tune_help = run.stdout.splitlines()
    assert imported == "[] False"
    assert helped == "[] False"          # the listing reads COMMANDS, not the modules
    # `tune --help` loads tune's module (and what it shares), not its api nor torch
    assert tune_help == "['edgekit.cli.complete', 'edgekit.cli.tune'] False False", tune_help


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_of_each_command_is_its_own(name):
    command = load_command(name)
    for limit in (30, 45, 200):
        assert make_default_short_help(COMMANDS[name][1], limit) == \
            command.get_short_help_str(limit), name
    assert command.name == name or name in ("probe", "provision", "rollback")


def test_command_modules_do_not_import_each_other_or_the_root():
    """No cycle: a command module imports only the renderers (render, dry_run), common and
    complete (of the CLI)."""
    for path in (ROOT / "edgekit" / "cli").glob("*.py"):
        if path.name in ("main.py", "completion.py"):
            continue
        own = re.findall(r"^\s*from edgekit\.cli(?:\.(\w+))? import (.+)$", path.read_text(),
                         re.M)
        for module, names in own:
            imported = {module} if module else {n.strip() for n in names.split(",")}
            assert imported <= {"render", "dry_run", "common", "complete"}, (path.name, imported)


def test_every_command_takes_json():
    missing = [path for path, command in every_command()
               if not any("--json" in p.opts for p in command.params)]
    assert not missing, missing


def test_an_edgekit_error_under_json_is_a_json_object_on_stdout_with_the_exit_code(home):
    result = invoke("targets", "show", "rpi-4", "--json")
    assert result.exit_code == 2
    said = json.loads(result.stdout)
    assert said["exit"] == 2 and said["kind"] == "ConfigError"
    assert "unknown target 'rpi-4'" in said["error"] and "rpi4" in said["hint"]
    assert set(said) == {"error", "exit", "hint", "kind"}

    missing = invoke("validate", str(home / "no-such-bundle"), "--json")
    assert missing.exit_code == 6
    said = json.loads(missing.stdout)
    assert said["exit"] == 6 and "no such bundle" in said["error"] and said["hint"]

    no_host = invoke("bench", "--json")          # bench's default subcommand, `run`
    assert no_host.exit_code == 2
    assert json.loads(no_host.stdout)["error"] == "hosts: name at least one device (or --lab)"


def test_without_json_the_error_stays_one_line_on_stderr(home):
    result = invoke("targets", "show", "rpi-4")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("error: target: unknown target 'rpi-4'")


def test_a_usage_error_under_json_is_json_too(home):
    result = invoke("deploy", "build/x", "--json", prog_name="edgekit")
    assert result.exit_code == 2
    said = json.loads(result.stdout)
    assert said == {"error": "Missing option '--host'.", "exit": 2,
                    "hint": "`edgekit deploy --help` lists the options", "kind": "UsageError"}
    plain = invoke("deploy", "build/x")
    assert plain.exit_code == 2 and "Missing option '--host'" in plain.stderr


def test_a_rollback_error_under_json_names_the_exit_code(home):
    device = home / "device"
    device.mkdir()
    result = invoke("rollback", f"local:{device}", "--app", "demo", "--json")
    assert result.exit_code == 2, result.output
    said = json.loads(result.stdout)
    assert "no release to roll back to" in said["error"] and said["exit"] == 2
    assert said["kind"] == "ConfigError" and "error:" not in result.stderr


def test_a_verdict_after_the_json_document_keeps_stdout_one_document(home):
    """bench compare exits 9 on a regression after printing its comparisons: the error goes
    to stderr so that stdout still parses."""
    result = invoke("bench", "compare", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_quiet_hides_the_progress_lines_and_verbose_times_them(home):
    device = home / "device"
    device.mkdir()
    args = ["releases", f"local:{device}", "--app", "demo", "--json"]
    normal = invoke(*args)
    assert normal.exit_code == 0 and json.loads(normal.stdout) == []
    assert normal.stderr == f"edgekit: connecting to local:{device}…\n"
    quiet = invoke("-q", *args)
    assert quiet.exit_code == 0 and quiet.stderr == "" and json.loads(quiet.stdout) == []
    verbose = invoke("-v", *args)
    assert verbose.exit_code == 0
    assert re.fullmatch(r"edgekit: \[\s+\d+\.\d s\] connecting to local:\S+…\n", verbose.stderr)
    both = invoke("-q", "-v", *args)      # a usage error, as JSON under --json
    assert both.exit_code == 2 and "-q and -v" in json.loads(both.stdout)["error"]
    assert "-q and -v" in invoke("-q", "-v", "lab", "status").stderr


def test_quiet_keeps_results_and_errors(home):
    result = invoke("-q", "targets", "show", "rpi-4")
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    listed = invoke("-q", "schema", "recipe")
    assert listed.exit_code == 0 and json.loads(listed.stdout)["title"]


def test_bench_runs_its_default_subcommand_and_lists_it_first():
    help_text = invoke("bench", "--help", terminal_width=80).stdout
    commands = help_text.split("Commands:\n", 1)[1].split("\n\n")[0].split()
    assert commands[0] == "run*"
    assert invoke("bench", "--lab", "--app", "x", "--threads", "one").exit_code == 2


def test_each_api_function_a_command_calls_is_callable_from_python():
    """What the CLI does, a Python program can: the api modules the commands name."""
    import importlib
    calls = set()
    for path in (ROOT / "edgekit" / "cli").glob("*.py"):
        calls |= set(re.findall(r"from edgekit\.api(?:\.(\w+))? import", path.read_text()))
    calls.discard("")
    assert {"rollback", "releases", "devices", "lab", "bench", "fleet", "targets",
            "toolchains", "tune", "check", "bisect", "build", "deploy", "validate"} <= calls
    for name in calls:
        module = importlib.import_module(f"edgekit.api.{name}")
        assert inspect.getdoc(module), name
    from edgekit.api.rollback import RolledBack, rollback
    assert RolledBack and inspect.signature(rollback).parameters["to"].default is None


def test_a_failed_validation_as_json_carries_its_report_and_a_python_caller_gets_the_same():
    from edgekit.cli.common import error_json
    from edgekit.errors import ConfigError, ValidationFailed
    from edgekit.models.report import ValidationReport
    report = ValidationReport(app="kws", target="host", where="lab-x86_64-1", ok=False,
                              outputs=(), seconds=0.1)
    said = error_json(ValidationFailed("outputs differ", report=report, hint="see the table"))
    assert said == {"error": "outputs differ", "exit": 8, "hint": "see the table",
                    "kind": "ValidationFailed", "report": report.model_dump(mode="json")}
    # a user's text is escaped in JSON as on the terminal: one line, no terminal escapes
    bad = ConfigError("unknown key", where="r.yaml:3", key="mo\x1bdel\n")
    assert bad.as_json()["error"] == "r.yaml:3: mo\\x1bdel\\n: unknown key"


def test_an_unexpected_error_under_json_names_its_log_in_the_hint(home, monkeypatch):
    state = home / "state"
    state.mkdir()
    (state / "devices.json").write_text("{not json")  # a state file cut short
    monkeypatch.setenv("EDGEKIT_HOME", str(state))
    result = invoke("devices", "list", "--json")
    assert result.exit_code == 1 and "Traceback" not in result.output
    said = json.loads(result.stdout)
    assert said["exit"] == 1 and said["kind"] == "JSONDecodeError"
    assert said["error"].startswith("json.decoder.JSONDecodeError: Expecting property name")
    log = next((state / "logs").iterdir())
    assert said["hint"] == f"the traceback is in {log}; rerun with --debug to print it"
