"""`edgekit inspect BUNDLE --kernels`: each dispatch's hot-loop instruction census and
llvm-mca's cycles per iteration, from the module alone (no board needed)."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.cli import render
from edgekit.cli.common import JSON, WIDE, examples, handle_errors


@click.command(epilog=examples(
    "edgekit inspect build/small-cnn-rpi5 --kernels",
    "edgekit inspect build/small-cnn-rpi4 --kernels --top 3 --json",
    "edgekit inspect bundle.tar --kernels --cpu cortex-a55"))
@click.argument("bundle", type=click.Path(exists=True, path_type=Path))
@click.option("--kernels", is_flag=True, required=True,
              help="census each dispatch's hot loop (vector FMAs, dot products, spills)")
@click.option("--top", type=click.IntRange(min=1), help="only the N biggest dispatches")
@click.option("--cpu", help="the CPU llvm-mca models [default: the one the bundle was built for]")
@JSON
@WIDE
@handle_errors
def inspect(bundle: Path, kernels: bool, top: int | None, cpu: str | None,
            as_json: bool) -> None:
    """What instructions a CPU bundle's dispatches run: each one's hot loop, counted, with
    llvm-mca's estimate of its cycles per iteration."""
    from dataclasses import asdict

    from edgekit.api.inspect import kernels as read_kernels
    found = read_kernels(bundle, top, cpu)
    if as_json:
        render.emit_json(asdict(found))
        return
    render.out.print(f"{found.bundle}: {found.target} ({found.arch}); hot loop = the loop with "
                     f"the most instructions of its own; cycles: llvm-mca -mcpu={found.cpu}, "
                     f"estimates", markup=False, highlight=False)
    table = render.fitted_table("", [("dispatch", "text"), ("bytes", "num"), ("loops", "num"),
                                     ("hot loop census", "text"), ("est. cycles/iter", "num")])
    for d in found.dispatches:
        counts = ", ".join(f"{k} {v}" for k, v in d.census.items())
        cycles = f"{d.cycles_per_iteration:g}" if d.cycles_per_iteration is not None else "?"
        table.add_row(render.untrusted(d.function), str(d.size), str(d.loops), counts, cycles)
    render.out.print(table)
