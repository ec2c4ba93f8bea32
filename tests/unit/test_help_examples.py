"""The `--help` of the most used commands ends with a short "Examples:" section whose commands
use options the command has, at 80 columns."""

import shlex

import pytest
from click.testing import CliRunner

from edgekit.cli.main import cli

pytestmark = pytest.mark.unit

MOST_USED = ["build", "deploy", "validate", "bench", "fleet update", "lab up", "probe",
             "rollback", "targets show", "tune"]


def command_at(path: str):
    command = cli
    for name in path.split():
        command = command.get_command(None, name)   # the root group loads it lazily
    return command


@pytest.mark.parametrize("path", MOST_USED)
def test_the_help_of_a_most_used_command_has_examples(path):
    result = CliRunner().invoke(cli, [*path.split(), "--help"], terminal_width=80)
    assert result.exit_code == 0, result.output
    assert all(len(line) <= 80 for line in result.output.splitlines()), result.output
    section = result.output.split("Examples:\n", 1)[1].splitlines()
    examples = [line.strip().partition("  #")[0] for line in section if line.strip()]
    assert 1 <= len(examples) <= 4, section
    command = command_at(path)
    # bench's examples run its default subcommand (`bench HOST …`) or name one
    options = {opt for p in command.params for opt in p.opts}
    if path == "bench":
        options |= {opt for sub in command.commands.values() for p in sub.params
                    for opt in p.opts}
    for example in examples:
        words = shlex.split(example)
        assert words[0] == "edgekit" and " ".join(words[1:]).startswith(path), example
        unknown = [w for w in words if w.startswith("-") and w not in options]
        assert not unknown, f"{example}: {unknown} is no option of `edgekit {path}`"
