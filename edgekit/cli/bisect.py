"""`edgekit bisect`: the first layer whose outputs leave tolerance on a device, the error
profile along the network, and a reproducer for that layer alone."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from edgekit.cli import complete, render
from edgekit.cli.common import HOST_HELP, IDENTITY, JSON, TRUST_PICKLE, examples, handle_errors


@click.command(epilog=examples(
    "edgekit bisect --recipe kws.yaml --target rpi4 --host pi@192.0.2.10",
    "edgekit bisect --bundle build/kws-mlp-rpi4 --local --html bisect.html"))
@click.option("--recipe", type=click.Path(path_type=Path), help="recipe YAML",
              shell_complete=complete.recipes)
@click.option("--target", help="target profile name or YAML path (with --recipe)",
              shell_complete=complete.targets)
@click.option("--bundle", type=click.Path(path_type=Path),
              help="instead of --recipe/--target: a built bundle (directory or .tar); its model "
                   "source must be on this machine, unchanged")
@click.option("--no-tuned", is_flag=True,
              help="with --recipe: ignore `edgekit tune`'s recorded choice")
@click.option("--host", help="run on this device (" + HOST_HELP + ")",
              shell_complete=complete.devices)
@click.option("--local", is_flag=True, help="run on this machine instead")
@IDENTITY
@click.option("--out", type=click.Path(path_type=Path),
              help="reproducer directory [default: build/<app>-<target>.bisect]")
@click.option("--html", type=click.Path(path_type=Path), help="also write an HTML report")
@TRUST_PICKLE
@JSON
@handle_errors
def bisect(recipe: Path | None, target: str | None, bundle: Path | None, no_tuned: bool,
           host: str | None, local: bool, identity: Path | None,
           out: Path | None, html: Path | None, trust_pickle: bool, as_json: bool) -> None:
    """Find the first layer whose outputs leave tolerance where a build runs wrongly: taps
    every module's output, then every op of the first failing module, compares each with eager
    PyTorch; writes that op alone as a reproducer bundle with a reproduce.sh. Builds as
    `edgekit build` would (a tuned choice included), or as --bundle's manifest says it was
    built. Exit 0 when nothing diverges, 8 when something does."""
    from edgekit.api.bisect import BisectOptions, bisect as run_bisect, summary, where_of
    from edgekit.errors import ValidationFailed
    options = BisectOptions(recipe=recipe, target=target, host=host, local=local,
                            identity=identity, out=out, trust_pickle=trust_pickle,
                            bundle=bundle, use_tuned=not no_tuned)
    with render.status("bisecting…") as status:
        result = run_bisect(options, say=status.update, html=html)
    if as_json:
        render.emit_json(_json(result))
    else:
        for level in result.levels:
            render.out.print(_table(level, result.quantization))
        for line in summary(result):
            render.out.print(escape(line), highlight=False)
    if html and not as_json:
        render.out.print(f"HTML report: {escape(str(html))}")
    if result.diverges:
        raise ValidationFailed(f"{where_of(result.first)} leaves tolerance on {result.where}",
                               report=None, hint=f"reproducer: {result.reproducer.script}"
                               if result.reproducer else None)


def _table(level, quantization: str | None) -> Table:
    columns = [("#", "num"), ("module", "short"), ("op", "short"), ("max abs err", "num"),
               ("cosine", "num")]
    if quantization:
        columns.append((f"vs fp32: max abs / cosine ({quantization} error)", "num"))
    columns.append(("verdict", "short"))
    table = render.fitted_table(escape(level.name), columns)
    for i, row in enumerate(level.rows, 1):
        c = row.check
        cells = [str(i), escape(row.tap.module or "(model)"), escape(row.tap.op),
                 f"{c.max_abs_error:.3g}", f"{c.cosine:.6f}" if c.cosine is not None else "–"]
        if quantization:
            f = row.fp32
            cells.append(f"{f.max_abs_error:.3g} / {f.cosine:.4f}" if f and f.cosine is not None
                         else f"{f.max_abs_error:.3g}" if f else "– (norm folded in)")
        cells.append("ok" if c.ok else "[red]beyond tolerance[/red]")
        table.add_row(*cells)
    return table


def _json(result) -> dict:
    def row(r):
        return {"node": r.tap.node, "module": r.tap.module, "module_type": r.tap.module_type,
                "op": r.tap.op, "model_output": r.tap.output, "ok": r.check.ok,
                "max_abs_error": r.check.max_abs_error, "cosine": r.check.cosine,
                "problems": list(r.check.problems),
                "fp32_max_abs_error": r.fp32.max_abs_error if r.fp32 else None,
                "fp32_cosine": r.fp32.cosine if r.fp32 else None}
    return {"app": result.app, "target": result.target, "where": result.where,
            "quantization": result.quantization, "diverges": result.diverges,
            "first": row(result.first) if result.first else None,
            "levels": [{"name": lv.name, "taps": [row(r) for r in lv.rows]}
                       for lv in result.levels],
            "reproducer": {"directory": str(result.reproducer.directory),
                           "script": str(result.reproducer.script),
                           "reproduced": result.reproducer.reproduced}
            if result.reproducer else None,
            "notes": list(result.notes), "seconds": result.seconds}
