"""`edgekit toolchains install|list`: the NPU compilers, each in its own venv under the cache."""

from __future__ import annotations

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.common import JSON, examples, handle_errors


@click.group()
def toolchains() -> None:
    """Optional toolchains with conflicting pins (NPU compilers), in their own venvs."""


@toolchains.command("install", epilog=examples(
    "edgekit toolchains install npu",
    "edgekit toolchains install rknn --accept-licence"))
@click.argument("group", type=click.Choice(["npu", "rknn"]))
@click.option("--accept-licence", is_flag=True,
              help="accept a proprietary toolchain's licence (rknn: Rockchip's)")
@JSON
@handle_errors
def toolchains_install(group: str, accept_licence: bool, as_json: bool) -> None:
    """Install GROUP: npu (ExecuTorch's Arm backend, tosa-tools, Vela) or rknn
    (rknn-toolkit2, proprietary). Already installed venvs are kept."""
    from edgekit.api.toolchains import install

    def say(line: str) -> None:       # stdout is the JSON document's with --json; -q: none
        if as_json:
            render.progress(escape(line))
        elif render.verbosity >= 0:
            render.out.print(escape(line), highlight=False)
    rows = install(group, accept_licence=accept_licence, progress=say)
    if as_json:
        render.emit_json(rows)


@toolchains.command("list", epilog=examples(
    "edgekit toolchains list"))
@JSON
@handle_errors
def toolchains_list(as_json: bool) -> None:
    """Each optional toolchain: installed or not, where, and its versions."""
    from edgekit.api.toolchains import installed
    rows = installed()
    if as_json:
        render.emit_json(rows)
        return
    table = render.fitted_table("", [("name", "key"), ("state", "short"), ("purpose", "text")])
    for row in rows:
        state = ("installed: " + ", ".join(f"{name} {row['versions'].get(name, '?')}"
                                           for name in row["main_packages"])
                 if row["installed"] else f"missing: {row['install_command']}")
        table.add_row(row["name"], escape(state), escape(row["purpose"]))
    render.out.print(table)
