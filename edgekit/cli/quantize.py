"""`edgekit quantize search|report`: parse, call edgekit.api.quantize, render."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import HOST_HELP, IDENTITY, JSON, TRUST_PICKLE, examples, \
    handle_errors


@click.group()
def quantize() -> None:
    """Mixed precision chosen by measured error: which layers of an int8 build stay float,
    and what quantizing cost."""


@quantize.command("search", epilog=examples(
    "edgekit quantize search --recipe digits.yaml --target host",
    "edgekit quantize search --recipe cnn.yaml --target rpi4 --max-drop 0.005",
    "edgekit quantize search --recipe cnn.yaml --target rpi4 --host lab-aarch64-1"))
@click.option("--recipe", type=click.Path(path_type=Path), required=True,
              help="recipe YAML with `quantize: {mode: int8, …}` and `validation.dataset`",
              shell_complete=complete.recipes)
@click.option("--target", required=True, help="target profile name or YAML path",
              shell_complete=complete.targets)
@click.option("--host", help="score and time the candidates on this device (" + HOST_HELP
              + ") [default: this machine, in process]", shell_complete=complete.devices)
@IDENTITY
@click.option("--max-drop", type=float, help="over the recipe's quantize.max_drop "
                                             "(default: its dataset gate's max_drop)")
@click.option("--max-float", type=click.IntRange(0, 64), default=4, show_default=True,
              help="keep at most this many layers float")
@click.option("--rounds", type=click.IntRange(1, 100), default=5, show_default=True,
              help="timing rounds (the builds interleaved in each)")
@click.option("--no-fp32", is_flag=True, help="do not build and time the float model")
@click.option("--build", "then_build", is_flag=True,
              help="then build the choice for --target (as `edgekit build` of a max_drop "
                   "recipe does)")
@TRUST_PICKLE
@JSON
@handle_errors
def search(recipe: Path, target: str, host: str | None, identity: Path | None,
           max_drop: float | None, max_float: int, rounds: int, no_fp32: bool,
           then_build: bool, trust_pickle: bool, as_json: bool) -> None:
    """Rank the layers of an int8 build by the error each adds against the float model
    (bisect's taps), build candidates keeping the k worst float, score each on the recipe's
    `validation.dataset` and time it on this machine (or on --host: trial releases, never
    activated, removed after); print the frontier and choose the fastest within max_drop.
    Exit 0 when one is, 18 when none is."""
    from edgekit.api import quantize as api
    options = api.SearchOptions(recipe=recipe, target=target, max_drop=max_drop,
                                max_float=max_float, rounds=rounds, fp32=not no_fp32,
                                trust_pickle=trust_pickle, host=host, identity=identity)
    built = None
    with render.status("searching…") as status:
        if then_build:
            result, built = api.build_searched(options, status.update)
        else:
            result = api.search(options, status.update)
    if as_json:
        render.emit_json(search_json(result, built))
    else:
        for line in search_lines(result):
            render.out.print(line, highlight=False)
        if built is not None:
            render.out.print(f"built: {escape(str(built.bundle.path))}", highlight=False)
    if result.chosen is None:
        api.refuse_unmet(result, recipe)       # its one line, exit 18


def search_lines(result) -> list:
    """The ranked layers, the frontier table and the choice (rich renderables)."""
    layers = render.fitted_table(
        f"layers by the error they add in all-int8 vs fp32 ({len(result.layers)})",
        [("#", "num"), ("layer", "short"), ("cosine", "num"), ("added 1-cos", "num"),
         ("max abs err", "num")])
    for i, e in enumerate(result.layers, 1):
        layers.add_row(str(i), escape(e.layer or "(model)"), _num(e.cosine, ".4f"),
                       _num(e.added, ".4f"), _num(e.max_abs_error, ".3g"))
    front = {id(c) for c in result.frontier}
    where = escape(result.target) if result.measured_on == "host" else \
        f"{escape(result.target)}, measured on {escape(result.measured_on)}"
    table = render.fitted_table(
        f"candidates for {where}: {result.metric}, float model "
        f"{result.reference_score:.4f}, max_drop {result.max_drop:g}",
        [("build", "short"), ("float layers", "short"), ("score", "num"), ("drop", "num"),
         ("p50 ms", "num"), ("", "short")])
    for c in result.candidates:
        marks = [m for m, on in (("chosen", c is result.chosen),
                                 ("frontier", id(c) in front),
                                 ("over max_drop", c.quantized and not c.meets(result.max_drop)))
                 if on]
        table.add_row(escape(c.name), escape(", ".join(c.float_layers) or "–"),
                      f"{c.score:.4f}", f"{c.drop:+.4f}", _num(c.p50_ms, ".4f"),
                      ", ".join(marks))
    lines = [layers, table]
    lines += [f"refused on {escape(result.measured_on)}: {escape(name)}: {escape(problems)}"
              for name, problems in result.refused]
    chosen = result.chosen
    if chosen is not None:
        lines.append(f"chosen: {escape(chosen.name)} (float: "
                     f"{escape(', '.join(chosen.float_layers) or 'none')}), drop "
                     f"{chosen.drop:+.4f} ≤ {result.max_drop:g}"
                     + _ratios(result))
        lines.append(escape("pin it in the recipe: quantize.keep_float: ["
                            + ", ".join(chosen.float_layers) + "]"))
    return lines


def _ratios(result) -> str:
    chosen = result.chosen
    if chosen.p50_ms is None:
        return ""
    parts = []
    for name in ("int8", "fp32"):
        other = next((c for c in result.candidates if c.name == name), None)
        if other is not None and other.p50_ms:
            parts.append(f"{chosen.p50_ms / other.p50_ms:.2f}× the {name} build's p50")
    return f"; {chosen.p50_ms:.4f} ms = " + ", ".join(parts) if parts else ""


def _num(value, fmt: str) -> str:
    return format(value, fmt) if value is not None else "–"


def search_json(result, built=None) -> dict:
    def cand(c):
        return {"name": c.name, "float_layers": list(c.float_layers), "score": c.score,
                "drop": c.drop, "p50_ms": c.p50_ms, "quantized": c.quantized,
                "meets": c.meets(result.max_drop) if c.quantized else None}
    return {"app": result.app, "target": result.target, "metric": result.metric,
            "max_drop": result.max_drop, "reference_score": result.reference_score,
            "layers": [e.model_dump(mode="json") for e in result.layers],
            "candidates": [cand(c) for c in result.candidates],
            "frontier": [c.name for c in result.frontier],
            "chosen": cand(result.chosen) if result.chosen else None,
            "bundle": str(built.bundle.path) if built is not None else None,
            "measured_on": result.measured_on,
            "refused": [{"name": n, "problems": p} for n, p in result.refused],
            "seconds": result.seconds}


@quantize.command("report", epilog=examples(
    "edgekit quantize report build/digits-host",
    "edgekit quantize report build/digits-host --html quantize.html"))
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--html", type=click.Path(path_type=Path), help="also write an HTML report")
@JSON
@handle_errors
def report(bundle: Path, html: Path | None, as_json: bool) -> None:
    """What a quantized BUNDLE's quantization cost and kept: per-layer error (int8 vs float),
    the layers kept float and why, the dataset score per precision."""
    from edgekit.api.quantize import report as make_report
    result = make_report(bundle, html)
    if as_json:
        render.emit_json({
            "app": result.app, "target": result.target, "mode": result.mode,
            "metric": result.metric,
            "float_layers": [e.model_dump(mode="json") for e in result.float_layers],
            "layers": [e.model_dump(mode="json") for e in result.layers],
            "scores": [{"precision": r.precision, "score": r.score, "drop": r.drop}
                       for r in result.scores],
            "notes": list(result.notes)})
        return
    say = render.out.print
    say(f"[bold]{escape(result.app)}[/] for {escape(result.target)}: {result.mode}, "
        f"{len(result.float_layers)} layer(s) kept float", highlight=False)
    for e in result.float_layers:
        why = (f"cosine {e.cosine:.4f} vs fp32 in all-int8, adds {e.added:.4f}"
               if e.cosine is not None and e.added is not None else "named in the recipe")
        say(f"  float: {escape(e.layer or '(model)')} ({why})", highlight=False)
    if result.layers:
        kept = {e.layer for e in result.float_layers}
        table = render.fitted_table("per-layer error, all-int8 vs fp32 (worst first)",
                                    [("layer", "short"), ("cosine", "num"),
                                     ("added 1-cos", "num"), ("max abs err", "num"),
                                     ("", "short")])
        for e in result.layers:
            table.add_row(escape(e.layer or "(model)"), _num(e.cosine, ".4f"),
                          _num(e.added, ".4f"), _num(e.max_abs_error, ".3g"),
                          "kept float" if e.layer in kept else "int8")
        say(table)
    if result.scores:
        table = render.fitted_table(f"dataset score per precision ({result.metric})",
                                    [("precision", "short"), ("score", "num"),
                                     ("drop", "num")])
        for r in result.scores:
            table.add_row(escape(r.precision), _num(r.score, ".4f"), _num(r.drop, "+.4f"))
        say(table)
    for note in result.notes:
        say(escape(note), highlight=False)
    if html:
        say(f"HTML report: {escape(str(html))}")
