"""`edgekit bench …`: time deployed models on devices (`bench HOST …` runs `bench run`),
compare results beyond their noise, show the history, write the HTML report."""

from __future__ import annotations

from pathlib import Path

import click
from click_default_group import DefaultGroup

from edgekit.cli import complete, render
from edgekit.cli.common import ALLOW_UNSIGNED, IDENTITY, JSON, WIDE, examples, handle_errors, \
    say_skipped


@click.group(cls=DefaultGroup, default="run", epilog=examples(
    "edgekit bench lab-aarch64-1 --app kws-mlp --threads 1,2",
    "edgekit bench --lab --bundle build/kws-mlp-host --html report.html",
    "edgekit bench compare      # newest vs previous release; exit 9 if slower",
    "edgekit bench report --html report.html"))
def bench() -> None:
    """Benchmark deployed models on devices; compare and report (`bench HOST … --app A`)."""


@bench.command("run", epilog=examples(
    "edgekit bench pi@192.0.2.10 --app kws-mlp",
    "edgekit bench --lab --bundle build/kws-mlp-host --threads 1,2 --rounds 3"))
@click.argument("hosts", nargs=-1, shell_complete=complete.devices)
@click.option("--lab", "all_lab", is_flag=True, help="every running lab device")
@click.option("--app", help="bench the app's current release",
              shell_complete=complete.apps)
@click.option("--bundle", type=click.Path(path_type=Path), help="deploy this bundle, bench it")
@click.option("--threads", help="comma-separated, e.g. 1,2,4 [default: the bundle's tuned "
              "configuration (driver and thread count), 1 when untuned]")
@click.option("--repetitions", default=50, show_default=True, help="measured calls")
@click.option("--warmup", default=5, show_default=True, help="calls dropped in each round")
@click.option("--rounds", default=5, show_default=True,
              help="separate benchmark processes, interleaved across configurations")
@IDENTITY
@ALLOW_UNSIGNED
@click.option("--html", type=click.Path(path_type=Path), help="write an HTML report here")
@JSON
@WIDE
@handle_errors
def bench_run(hosts: tuple[str, ...], all_lab: bool, app: str | None, bundle: Path | None,
              threads: str | None, repetitions: int, warmup: int, rounds: int,
              identity: Path | None, allow_unsigned: bool, html: Path | None,
              as_json: bool) -> None:
    """Run iree-benchmark-module on one or more devices; results go to the history."""
    from edgekit.api import bench as api
    from edgekit.errors import ConfigError
    if not hosts and not all_lab:
        raise ConfigError("name at least one device (or --lab)", key="hosts")
    try:
        thread_counts = tuple(int(t) for t in threads.split(",")) if threads else None
    except ValueError:
        raise ConfigError(f"--threads must be numbers separated by commas (got {threads!r})",
                          key="threads") from None
    options = api.BenchOptions(hosts=hosts, app=app, bundle=bundle, threads=thread_counts,
                               repetitions=repetitions, warmup=warmup, rounds=rounds,
                               identity=identity, allow_unsigned=allow_unsigned)
    if as_json:
        done = api.run(options, html=html, all_lab=all_lab)
        render.emit_json({"results": [r.model_dump(mode="json") for r in done.results],
                          "comparisons": [c.model_dump(mode="json") for c in done.comparisons]})
        return
    done = render.with_progress(lambda progress: api.run(options, progress, html=html,
                                                         all_lab=all_lab))
    render.bench_table(done.results)
    render.comparison_table(done.comparisons)
    if html:
        render.out.print(f"report: {html}")


@bench.command("compare", epilog=examples(
    "edgekit bench compare",
    "edgekit bench compare 3f2a 9c1d --wide"))
@click.argument("ids", nargs=-1)
@click.option("--force", is_flag=True, help="compare two results although they measure "
              "different devices, apps, targets, thread counts or drivers")
@WIDE
@JSON
@handle_errors
def bench_compare(ids: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Two result ids (base, new), or none: each series' newest result against its previous
    release. A regression is flagged only beyond the measured noise (exit 9). Nothing to
    compare is said on stderr and exits 0: a first release has no baseline, which is no
    failure of a pipeline that gates on regressions."""
    from edgekit.api.bench import compare
    from edgekit.errors import BenchRegression
    compared = compare(ids, force)
    say_skipped(compared.notes)
    comparisons = compared.comparisons
    if as_json:
        render.emit_json([c.model_dump(mode="json") for c in comparisons])
    elif not comparisons:
        render.err.print("nothing to compare: no device, app and thread count has results of "
                         "two releases (`edgekit bench history` lists the results)",
                         highlight=False)
    else:
        render.comparison_table(comparisons, title=compared.title)
    regressions = compared.regressions
    if regressions:
        raise BenchRegression(f"{len(regressions)} of {len(comparisons)} comparison(s) slower "
                              "beyond the measured noise",
                              where=", ".join(sorted({f"{c.device} {c.app}" for c in regressions})))


@bench.command("history", epilog=examples(
    "edgekit bench history --app kws-mlp",
    "edgekit bench history --json"))
@click.option("--app", help="only this app",
              shell_complete=complete.apps)
@JSON
@WIDE
@handle_errors
def bench_history(app: str | None, as_json: bool) -> None:
    """Stored results, oldest first."""
    from edgekit.api.bench import history
    stored = history(app)
    say_skipped(stored.notes)
    if as_json:
        render.emit_json([r.model_dump(mode="json") for r in stored.results])
    else:
        render.bench_table(stored.results, with_ids=True)


@bench.command("report", epilog=examples(
    "edgekit bench report --html bench.html",
    "edgekit bench report --app kws-mlp --html kws.html"))
@click.option("--app", help="only this app",
              shell_complete=complete.apps)
@click.option("--html", type=click.Path(path_type=Path), required=True)
@JSON
@handle_errors
def bench_report(app: str | None, html: Path, as_json: bool) -> None:
    """HTML report of the stored history (distribution, thread scaling, releases, dataset
    scores); each scored release's accuracy beside its latency here too."""
    from edgekit.api.bench import report
    written = report(html, app)
    say_skipped(written.notes)
    if as_json:
        render.emit_json({"html": str(written.html), "results": len(written.results),
                          "scores": [{"device": r.device, "app": r.app, "release": r.release,
                                      "p50_ms": r.latency.p50_ms, **r.dataset.model_dump()}
                                     for r in written.scores]})
        return
    render.out.print(f"report: {html} ({len(written.results)} results)")
    render.score_lines(written.scores)
