"""`edgekit bench …`: time deployed models on devices (results go to the local history),
compare results beyond their measured noise, and report the history as HTML."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.device.bench import BenchOptions, run_bench
from edgekit.errors import ConfigError
from edgekit.models.bench import BenchResult, Comparison

Progress = Callable[[str, int, int], None]     # (description, done, total)


@dataclass(frozen=True)
class BenchRun:
    results: list[BenchResult]
    comparisons: list[Comparison]   # each result against its previous release, where known
    html: Path | None = None


@dataclass(frozen=True)
class Compared:
    comparisons: list[Comparison]
    title: str
    notes: list[str] = field(default_factory=list)   # stored results that could not be used

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.regression]


@dataclass(frozen=True)
class History:
    results: list[BenchResult]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    html: Path
    results: list[BenchResult]
    notes: list[str] = field(default_factory=list)

    @property
    def scores(self) -> list[BenchResult]:
        """The newest result of each device × app × release that has a dataset score (its
        accuracy beside its latency)."""
        newest = {(r.device, r.app, r.release): r for r in self.results if r.dataset}
        return list(newest.values())


def run(options: BenchOptions, on_progress: Progress | None = None, html: Path | None = None,
        all_lab: bool = False) -> BenchRun:
    """Bench on `options.hosts`, every running lab device too with `all_lab`; results are
    stored in the history; an HTML report is written to `html` if given."""
    import dataclasses

    if all_lab:
        from edgekit.api.lab import running
        options = dataclasses.replace(options, hosts=(*options.hosts, *running()))
    if not options.hosts:
        raise ConfigError("name at least one device (or --lab)", key="hosts")
    results = run_bench(options, on_progress)
    comparisons = _against_previous(results)
    if html:
        _write_html(html, results, comparisons)
    return BenchRun(results, comparisons, html)


def compare(ids: tuple[str, ...] = (), force: bool = False) -> Compared:
    """Two result ids (base, new), or none: each series' newest result against its previous
    release."""
    from edgekit.device.history import compare as compare_two, compare_latest, differences, get
    if len(ids) == 2:
        base, new = get(ids[0]), get(ids[1])
        differ = differences(base, new)
        if differ and not force:
            raise ConfigError(f"results {base.id} and {new.id} measure different things "
                              f"({'; '.join(differ)})", key="ids",
                              hint="compare results of one device, app, target and thread "
                                   "count, or pass --force")
        return Compared([compare_two(base, new)], f"{base.id} vs {new.id}" +
                        (f" (forced: {'; '.join(differ)})" if differ else ""))
    if ids:
        raise ConfigError("give two result ids (base new) or none", key="ids")
    notes: list[str] = []
    comparisons = compare_latest(notes)
    return Compared(comparisons, "newest result of each series against its previous release",
                    notes)


def history(app: str | None = None) -> History:
    """Stored results, oldest first (only `app`'s if given)."""
    from edgekit.device.history import load_history
    notes: list[str] = []
    return History([r for r in load_history(notes) if app is None or r.app == app], notes)


def report(html: Path, app: str | None = None) -> Report:
    """Write the HTML report of the stored history (distribution, thread scaling,
    releases) to `html`."""
    from edgekit.device.history import compare_latest
    stored = history(app)
    comparisons = [c for c in compare_latest() if app is None or c.app == app]
    _write_html(html, stored.results, comparisons)
    return Report(html, stored.results, stored.notes)


def _against_previous(results: list[BenchResult]) -> list[Comparison]:
    from edgekit.device.history import compare as compare_two, load_history, \
        previous_release_result
    stored = load_history()
    found = []
    for r in results:
        base = previous_release_result(r, stored)
        if base is not None:
            found.append(compare_two(base, r))
    return found


def _write_html(path: Path, results: list[BenchResult], comparisons: list[Comparison]) -> None:
    from edgekit.device.history import load_history
    from edgekit.report.bench_html import render_report
    apps = {(r.device, r.app) for r in results}
    stored = [h for h in load_history() if (h.device, h.app) in apps]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path.write_text(render_report(results, comparisons, stored, now))


__all__ = ["BenchOptions", "BenchRun", "Compared", "History", "Report", "compare", "history",
           "report", "run"]
