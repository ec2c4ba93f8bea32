"""`edgekit lab …`: emulated devices (a real sshd on 127.0.0.x) for trying edgekit."""

from __future__ import annotations

import click

from edgekit.cli import render
from edgekit.cli.common import JSON, examples, handle_errors


@click.group()
def lab() -> None:
    """Emulated devices: real sshd on 127.0.0.x (x86_64 with llvmpipe; aarch64 under qemu)."""


@lab.command("up", epilog=examples(
    "edgekit lab up                            # lab-x86_64-1",
    "edgekit lab up --arch aarch64 --count 2   # two Raspberry Pi 4 stand-ins",
    "edgekit lab up --name bench-box --json"))
@click.option("--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64",
              show_default=True)
@click.option("--count", type=click.IntRange(1, 32),
              help="how many devices (default 1, or one per --name)")
@click.option("--name", "names", multiple=True,
              help="the device's name (repeat for several); default lab-ARCH-N, numbered "
                   "from 1 in this lab")
@JSON
@handle_errors
def lab_up(arch: str, count: int | None, names: tuple[str, ...], as_json: bool) -> None:
    """Start lab devices as you (no root), pin their host keys and register them by name."""
    from edgekit.api.lab import up
    with render.status("starting the lab…") as status:
        started = up(arch, count, names, on_progress=status.update)
    if as_json:
        render.emit_json([{**d.model_dump(), "address": d.address} for d in started])
        return
    # one device per line (a user@127.0.0.x:port address is ~35 characters), the hint once:
    # the lines stay within 80 columns
    for d in started:
        render.out.print(f"{d.name}: {d.address} ({d.arch})", soft_wrap=True, highlight=False)
    if started:
        render.out.print(f"e.g. edgekit probe {started[0].name}", highlight=False)


@lab.command("status", epilog=examples(
    "edgekit lab status",
    "edgekit lab status --json"))
@JSON
@handle_errors
def lab_status(as_json: bool) -> None:
    """Lab devices and whether they run."""
    from edgekit.api.lab import status
    rows = status()
    if as_json:
        render.emit_json(rows)
        return
    if not rows:
        render.out.print("no lab devices (start some with `edgekit lab up`)")
    for r in rows:
        state = "[green]running[/]" if r["running"] else "[red]stopped[/]"
        render.out.print(f"{r['name']:<16} {r['address']:<28} {r['arch']:<8} {state}")


@lab.command("down", epilog=examples(
    "edgekit lab down"))
@JSON
@handle_errors
def lab_down(as_json: bool) -> None:
    """Stop every lab device and remove its files and registration."""
    from edgekit.api.lab import down
    stopped = down(on_progress=lambda line: render.progress(line, markup=False))
    if as_json:
        render.emit_json({"stopped": stopped})
        return
    render.out.print(f"stopped {len(stopped)} lab device(s)")
