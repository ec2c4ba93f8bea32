"""Every command's `--help` ends with a short "Examples:" section whose commands use options
the command has, at 80 columns."""

import shlex

import click
import pytest
from click.testing import CliRunner

from edgekit.cli.main import cli

pytestmark = pytest.mark.unit


def leaf_commands(group=cli, path=()) -> list[str]:
    found = []
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if isinstance(command, click.Group):
            found += leaf_commands(command, (*path, name))
        else:
            found.append(" ".join((*path, name)))
    return found


# bench's own help shows its default subcommand's examples (`bench HOST …`)
EVERY = ["bench", *leaf_commands()]
DEFAULT_SUBCOMMAND = {"bench run": "bench"}


def command_at(path: str):
    command = cli
    for name in path.split():
        command = command.get_command(None, name)   # the root group loads it lazily
    return command


def test_every_command_is_checked():
    assert len(EVERY) > 40
    assert {"build", "bench run", "fleet update", "channel publish"} <= set(EVERY)


@pytest.mark.parametrize("path", EVERY)
def test_the_help_of_every_command_has_examples(path):
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
        said = " ".join(words[1:])
        assert words[0] == "edgekit" and (said.startswith(path) or said.startswith(
            DEFAULT_SUBCOMMAND.get(path, path))), example
        unknown = [w for w in words if w.startswith("-") and w not in options]
        assert not unknown, f"{example}: {unknown} is no option of `edgekit {path}`"
