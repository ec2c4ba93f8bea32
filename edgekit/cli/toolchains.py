"""`edgekit toolchains install|list`: the NPU compilers, each in its own venv under the cache."""

from __future__ import annotations

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.main import cli, handle_errors


@cli.group()
def toolchains() -> None:
    """Optional toolchains with conflicting pins (NPU compilers), in their own venvs."""


@toolchains.command("install")
@click.argument("group", type=click.Choice(["npu", "rknn"]))
@click.option("--accept-licence", is_flag=True,
              help="accept a proprietary toolchain's licence (rknn: Rockchip's)")
@handle_errors
def toolchains_install(group: str, accept_licence: bool) -> None:
    """Install GROUP: npu (ExecuTorch's Arm backend, tosa-tools, Vela) or rknn
    (rknn-toolkit2, proprietary). Already installed venvs are kept."""
    from edgekit.toolchain.venvs import install
    install(group, accept_licence=accept_licence,
            progress=lambda line: render.out.print(escape(line), highlight=False))


@toolchains.command("list")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def toolchains_list(as_json: bool) -> None:
    """Each optional toolchain: installed or not, where, and its versions."""
    from edgekit.toolchain.venvs import TOOLCHAINS, install_command, versions
    rows = [{"name": t.name, "purpose": t.purpose, "installed": t.installed(),
             "directory": str(t.directory()),
             "versions": versions(t.name) if t.installed() else {}} for t in TOOLCHAINS.values()]
    if as_json:
        render.emit_json(rows)
        return
    table = render.fitted_table("", [("name", "key"), ("state", "short"), ("purpose", "text")])
    for row, chain in zip(rows, TOOLCHAINS.values()):
        state = ("installed: " + ", ".join(f"{name} {row['versions'].get(name, '?')}"
                                           for name in chain.main_packages())
                 if row["installed"] else f"missing: {install_command(row['name'])}")
        table.add_row(row["name"], escape(state), escape(row["purpose"]))
    render.out.print(table)
