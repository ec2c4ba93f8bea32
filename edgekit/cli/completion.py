"""`edgekit completion SHELL`: the shell completion script."""

from __future__ import annotations

import sys

import click

from edgekit.cli import complete, render
from edgekit.cli.common import JSON, examples, handle_errors


@click.command(epilog=examples(
    "edgekit completion bash > ~/.local/share/bash-completion/completions/edgekit",
    "edgekit completion zsh > ~/.zfunc/_edgekit"))
@click.argument("shell", type=click.Choice(complete.SHELLS))
@JSON
@handle_errors
def completion(shell: str, as_json: bool) -> None:
    """Print the shell completion script: commands, options, target names, registered devices
    and recipe paths complete on TAB.

    \b
    bash: echo 'eval "$(edgekit completion bash)"' >> ~/.bashrc
    zsh:  echo 'eval "$(edgekit completion zsh)"' >> ~/.zshrc
    fish: edgekit completion fish > ~/.config/fish/completions/edgekit.fish
    """
    from edgekit.cli.main import cli
    text = complete.script(cli, shell)
    if as_json:
        render.emit_json({"shell": shell, "script": text})
    else:
        sys.stdout.write(text)
