"""`edgekit tune`: pick the fastest validated lowering × flag set × threads by measuring."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import HOST_HELP, JSON, WIDE, examples, handle_errors


def _csv(text: str | None) -> tuple[str, ...] | None:
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else None


@click.command(epilog=examples(
    "edgekit tune --recipe recipes/resnet18.yaml --target host   # measure here",
    "edgekit tune --recipe recipes/kws_mlp.yaml --target rpi4 --host HOST",
    "edgekit tune --recipe recipes/resnet18.yaml --target host --dispatches 3"))
@click.option("--recipe", required=True, type=click.Path(path_type=Path), help="recipe YAML",
              shell_complete=complete.recipes)
@click.option("--target", required=True, help="target profile name or YAML path",
              shell_complete=complete.targets)
@click.option("--host", help="measure on this device (" + HOST_HELP + "); needed for targets "
              "this machine cannot run", shell_complete=complete.devices)
@click.option("--identity", type=click.Path(path_type=Path), help="private key for --host")
@click.option("--lowerings", help="e.g. tosa,linalg [default: the profile's]")
@click.option("--flag-sets", help="names from the profile's tune.flag_sets [default: all]")
@click.option("--threads", help="thread budget, e.g. 1,2: each count is measured and the "
              "untuned build runs with the largest [default: the profile's tune.threads]")
@click.option("--runtime", type=click.Choice(["auto", "in-process", "tools"]),
              help="where candidates are timed: in-process (IREE's Python runtime, as "
              "edgekit.compile and the Python API run a bundle) or tools "
              "(iree-benchmark-module, here or on --host) [default: the recipe's "
              "tune.runtime, else the profile's; auto: in-process here, the device's tools "
              "with --host]")
@click.option("--rounds", default=5, show_default=True, help="benchmark rounds (interleaved)")
@click.option("--repetitions", default=30, show_default=True,
              help="measured calls per candidate and thread count")
@click.option("--conv-choice", is_flag=True,
              help="then choose per convolution between direct and im2col + matmul by "
                   "each one's time in IREE's HAL profile (whole-model timing on --host)")
@click.option("--dispatches", default=0, show_default=True,
              help="then search tile sizes for this many of the costliest dispatches "
                   "(llvm-cpu; a few candidates around the compiler's choice each)")
@click.option("--per-dispatch", default=4, show_default=True,
              help="tile-size candidates per dispatch with --dispatches")
@click.option("--no-cache", is_flag=True, help="rebuild the candidates")
@WIDE
@JSON
@handle_errors
def tune(recipe: Path, target: str, host: str | None, identity: Path | None,
         lowerings: str | None, flag_sets: str | None, threads: str | None,
         runtime: str | None, rounds: int,
         repetitions: int, conv_choice: bool, dispatches: int, per_dispatch: int,
         no_cache: bool,
         as_json: bool) -> None:
    """Build, validate and benchmark lowering × flag set × threads variants; record the
    fastest valid one so that `build` and `deploy` use it."""
    from edgekit.errors import ConfigError
    from edgekit.api.tune import TuneOptions, tune as run_tune
    try:
        thread_counts = tuple(int(t) for t in _csv(threads)) if threads else None
    except ValueError:
        raise ConfigError(f"--threads takes numbers, e.g. 1,2 (got {threads!r})",
                          key="threads") from None
    options = TuneOptions(recipe=recipe, target=target, host=host, identity=identity,
                          lowerings=_csv(lowerings), flag_sets=_csv(flag_sets),
                          threads=thread_counts, runtime=runtime, rounds=rounds,
                          repetitions=repetitions, use_cache=not no_cache,
                          conv_choice=conv_choice, dispatches=dispatches,
                          per_dispatch=per_dispatch)
    if as_json:
        render.emit_json(run_tune(options).model_dump(mode="json"))
        return
    with render.steps("tuning…") as status:
        record = run_tune(options, on_progress=lambda text: status.update(escape(text)))
    tuning_table(record)


def tuning_table(record) -> None:
    """Candidates fastest first; the speed-up is against the untuned build at the same thread
    count, paired round by round, with its noise. At terminal width the failures' reasons
    follow the table (--wide: in it)."""
    from edgekit.api.tune import paired_gain
    table = render.fitted_table(
        f"tuning {record.app} for {record.target} (measured on {record.measured_on}, "
        f"{record.measured_in})",
        [("variant", "short"), ("thr", "num"), ("p50 ms", "num"), ("time Δ", "num"),
         ("module B", "num"), ("result", "text" if render.wide else "short")])
    # variant names break between their parts; the column never gets narrower than the
    # longest part, so rich squeezes the result column instead of cutting a name mid-word
    width = max(len(line) for c in record.candidates
                for line in render.fold_at(c.variant, 16).split("\n"))
    names = {c.variant: render.fold_at(c.variant, width) for c in record.candidates}
    table.columns[0].min_width = width
    defaults = {c.threads: c for c in record.candidates
                if c.variant == record.default_variant and c.p50_ms}
    notes = []
    for c in record.candidates:
        base = defaults.get(c.threads)
        paired = paired_gain(c, base) if base is not None and c is not base else None
        # as a change of time like `bench compare`'s: + is slower than the untuned build
        ratio = (f"{-paired[0]:+.1f}% ±{paired[1]:.1f}" if paired else
                 "untuned" if c is base else "-")
        if c.status != "ok":
            result = f"[red]{c.status}[/]"
            if render.wide:
                result += f" {escape(c.reason)}"
            else:
                notes.append(f"  {escape(c.variant)} ({c.threads}t) {c.status}: "
                             f"{escape(c.reason)}")
        else:   # an ok candidate's reason says whose measurement it shares
            result = ("[bold green]chosen[/]" if c == record.chosen else "[green]ok[/]") + \
                (f" ({escape(c.reason)})" if c.reason else "")
        table.add_row(escape(names[c.variant]), str(c.threads),
                      "-" if c.p50_ms is None else f"{c.p50_ms:.4f}", ratio,
                      f"{c.module_bytes:,}" if c.module_bytes else "-", result)
    render.out.print(table)
    render.out.print("  time Δ: p50 time against the untuned build, median over the paired "
                     "rounds ± its standard error (- is faster); a variant is taken when "
                     "faster by more than 3% and the noise", highlight=False)
    for line in notes:
        render.out.print(line, highlight=False)
    c = record.chosen
    # the reference: the untuned build at the whole thread budget (tuner.choose)
    measured = [o for o in record.candidates if o.status == "ok" and o.p50_ms]
    top = max((o.threads for o in measured), default=c.threads)
    reference = next((o for o in measured if o.variant == record.default_variant
                      and o.threads == top), None)
    gain = paired_gain(c, reference) if reference is not None and c != reference else None
    if record.confirmation.startswith("win not repeated"):
        speedup = f" (the untuned build: {escape(record.confirmation)})"
    elif c == reference or (reference is None and c.variant == record.default_variant):
        speedup = " (the untuned build: " + (
            f"the fastest, {record.fastest}, was {record.gain_pct:.1f}% ±{record.noise_pct:.1f}"
            "% faster: not beyond 3% and the noise)" if record.gain_pct is not None and
            record.fastest and record.fastest != f"{c.variant} ({c.threads}t)" else
            "no variant beat it round by round)")
    elif gain is not None:
        speedup = (f", {gain[0]:.1f}% ±{gain[1]:.1f}% faster than the untuned "
                   f"{record.default_variant} at {top} thread(s)")
    else:
        speedup = f", ×{record.default_p50_ms / c.p50_ms:.2f} faster than the untuned " \
            f"{record.default_variant}" if record.default_p50_ms else ""
    # the other lowerings with IREE's default flags: what the choice saves over plain IREE
    others = [f"×{o.p50_ms / c.p50_ms:.2f} than {o.variant}" for o in record.candidates
              if o.flag_set == "default" and o.variant != record.default_variant
              and o.threads == c.threads and o.p50_ms]
    render.out.print(f"chosen: {c.variant} at {c.threads} thread(s), p50 {c.p50_ms:.4f} ms"
                     f"{speedup}{''.join(', ' + o for o in others)}; `edgekit build` and "
                     "`deploy` use it from now on (`--no-tuned` for the profile's default)")
    if record.confirmation.startswith("win repeated"):
        render.out.print(f"  {escape(record.confirmation)}", highlight=False)
