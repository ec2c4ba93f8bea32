"""Self-contained HTML benchmark report: a summary table and inline-SVG plots (matplotlib) of the
latency distribution per configuration and device, thread scaling, history over releases, and
each release's dataset score (`validation.dataset`, measured on the device) against its speed.
No network access is needed to view it. A small script marks each plot as rendered once the
browser has laid it out (`data-plots-rendered` on <body>), which the tests check in Chromium.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")  # no display; SVG output only
import matplotlib.pyplot as plt  # noqa: E402

from edgekit.models.bench import BenchResult, Comparison  # noqa: E402

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)


def render_report(results: list[BenchResult], comparisons: list[Comparison],
                  history: list[BenchResult], generated: str) -> str:
    plots = [("Per-call latency distribution (ms) per device and configuration",
              _distribution_svg(results))]
    scaling = _scaling_svg(results)
    if scaling:
        plots.append(("Thread scaling: p50 latency (ms) by thread count", scaling))
    series = _series(history or results)
    history_note = None
    if any(len(runs) > 1 for runs in series.values()):
        plots.append(("History over releases: p50 latency (ms)", _history_svg(series)))
    else:   # one point per line is an empty axis with its labels on top of each other
        history_note = ("History over releases: one run per device and configuration so far; "
                        "the plot appears after a second run.")
    scored = [r for r in (history or results) if r.dataset is not None]
    if scored:
        plots.append(("Dataset score on the device against p50 latency (ms), per device and "
                      "release", _score_svg(scored)))
    return TEMPLATES.get_template("bench.html.j2").render(
        results=results, comparisons=comparisons, plots=plots, generated=generated,
        history_note=history_note)


def _scale(ax, values: list[float]) -> None:
    """Log scale when devices differ by orders of magnitude (an emulated Pi beside a PC)."""
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype for inline use


def _label(r: BenchResult) -> str:
    return f"{r.device.split('@')[-1]}\n{r.config.get('threads')}t {r.release[:8]}"


def _distribution_svg(results: list[BenchResult]) -> str:
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(results)), 4))
    ax.boxplot([r.latency.samples_ms for r in results], showfliers=True)
    _scale(ax, [v for r in results for v in r.latency.samples_ms])
    ax.set_xticks(range(1, len(results) + 1), [_label(r) for r in results], fontsize=8)
    ax.set_ylabel("ms per call")
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig)


def _scaling_svg(results: list[BenchResult]) -> str | None:
    series: dict[tuple, list[tuple[int, float]]] = defaultdict(list)
    for r in results:
        series[(r.device, r.app, r.release)].append((int(r.config.get("threads", 1)),
                                                      r.latency.p50_ms))
    if not any(len(points) > 1 for points in series.values()):
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for (device, app, release), points in series.items():
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{device} {app} {release[:8]}")
    _scale(ax, [p[1] for points in series.values() for p in points])
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("threads")
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)


def _series(history: list[BenchResult]) -> dict[tuple, list[BenchResult]]:
    """The runs of each device × app × threads, oldest first."""
    series: dict[tuple, list[BenchResult]] = defaultdict(list)
    for r in history:
        series[(r.device, r.app, r.config.get("threads"))].append(r)
    return series


def _history_svg(series: dict[tuple, list[BenchResult]]) -> str:
    fig, ax = plt.subplots(figsize=(7, 4))
    for (device, app, threads), runs in series.items():
        ax.plot(range(len(runs)), [r.latency.p50_ms for r in runs], marker="o",
                label=f"{device} {app} {threads}t")
        for i, r in enumerate(runs):
            ax.annotate(r.release[:6], (i, r.latency.p50_ms), fontsize=6,
                        textcoords="offset points", xytext=(0, 4), ha="center")
    _scale(ax, [r.latency.p50_ms for runs in series.values() for r in runs])
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("run (oldest → newest)")
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)


def _score_svg(scored: list[BenchResult]) -> str:
    """One point per device × release × threads (its newest run): accuracy beside speed."""
    newest = {(r.device, r.app, r.release, r.config.get("threads")): r for r in scored}
    fig, ax = plt.subplots(figsize=(7, 4))
    for device in dict.fromkeys(key[0] for key in newest):
        runs = [r for key, r in newest.items() if key[0] == device]
        ax.plot([r.latency.p50_ms for r in runs], [r.dataset.measured for r in runs],
                marker="o", linestyle="none", label=device)
        for r in runs:
            ax.annotate(f"{r.release[:6]} {r.config.get('threads')}t",
                        (r.latency.p50_ms, r.dataset.measured), fontsize=6,
                        textcoords="offset points", xytext=(0, 4), ha="center")
    positive = [r.latency.p50_ms for r in newest.values() if r.latency.p50_ms > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_xscale("log")
    metrics = sorted({r.dataset.metric for r in newest.values()})
    ax.set_xlabel("p50 ms")
    ax.set_ylabel(f"dataset score ({', '.join(metrics)})")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)
