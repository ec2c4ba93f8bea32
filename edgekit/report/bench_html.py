"""Self-contained HTML benchmark report: a summary table and inline-SVG plots (matplotlib) of the
latency distribution per configuration and device, thread scaling, and history over releases.
No network access is needed to view it. A small script marks each plot as rendered once the
browser has laid it out (`data-plots-rendered` on <body>), which the tests check in Chromium.
"""

from __future__ import annotations

import io
from collections import defaultdict

import jinja2
import matplotlib

matplotlib.use("Agg")  # no display; SVG output only
import matplotlib.pyplot as plt  # noqa: E402

from edgekit.models.bench import BenchResult, Comparison  # noqa: E402

TEMPLATE = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgekit benchmark report</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
 table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
 th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
 th:first-child, td:first-child { text-align: left; }
 .bad { color: #b00; } .good { color: #070; }
 figure { margin: 1.5em 0; } figcaption { font-weight: 600; margin-bottom: .5em; }
</style></head>
<body data-plots-expected="{{ plots|length }}">
<h1>edgekit benchmark report</h1>
<p>{{ results|length }} result(s); generated {{ generated }}.</p>
<table><tr><th>device</th><th>app</th><th>release</th><th>target</th><th>threads</th>
<th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>mean ± sd ms</th><th>calls/s</th>
<th>peak RSS MiB</th><th>reliable</th></tr>
{% for r in results %}<tr><td>{{ r.device }}</td><td>{{ r.app }}</td><td>{{ r.release }}</td>
<td>{{ r.target }}</td><td>{{ r.config.threads }}</td><td>{{ "%.3f"|format(r.latency.p50_ms) }}</td>
<td>{{ "%.3f"|format(r.latency.p90_ms) }}</td><td>{{ "%.3f"|format(r.latency.p99_ms) }}</td>
<td>{{ "%.3f ± %.3f"|format(r.latency.mean_ms, r.latency.stddev_ms) }}</td>
<td>{{ "%.1f"|format(r.latency.throughput_per_s) }}</td>
<td>{{ "%.1f"|format(r.peak_rss_kb / 1024) }}</td>
<td class="{{ '' if r.reliable else 'bad' }}">{{ 'yes' if r.reliable else 'no: ' ~ r.unreliable_reasons|join('; ') }}</td></tr>
{% endfor %}</table>
{% if comparisons %}<h2>Comparisons</h2>
<table><tr><th>device</th><th>app</th><th>threads</th><th>base → new release</th>
<th>p50 ms</th><th>change</th><th>noise</th><th>verdict</th></tr>
{% for c in comparisons %}<tr><td>{{ c.device }}</td><td>{{ c.app }}</td><td>{{ c.config.threads }}</td>
<td>{{ c.base_release }} → {{ c.new_release }}</td>
<td>{{ "%.3f → %.3f"|format(c.base_p50_ms, c.new_p50_ms) }}</td><td>{{ "%+.1f%%"|format(c.delta_pct) }}</td>
<td>±{{ "%.1f%%"|format(c.noise_pct) }}</td>
<td class="{{ 'bad' if c.regression else ('good' if c.improvement else '') }}">{{ 'REGRESSION' if c.regression else ('improvement' if c.improvement else 'within noise') }}</td></tr>
{% endfor %}</table>{% endif %}
{% for title, svg in plots %}<figure class="plot"><figcaption>{{ title }}</figcaption>{{ svg|safe }}</figure>
{% endfor %}
<script>
 window.addEventListener("load", () => {
   const rendered = [...document.querySelectorAll("figure.plot svg")]
     .filter(svg => { const b = svg.getBoundingClientRect(); return b.width > 50 && b.height > 50
                      && svg.querySelectorAll("path").length > 0; });
   document.body.dataset.plotsRendered = String(rendered.length);
 });
</script>
</body></html>
""")


def render_report(results: list[BenchResult], comparisons: list[Comparison],
                  history: list[BenchResult], generated: str) -> str:
    plots = [("Per-call latency distribution (ms) per device and configuration",
              _distribution_svg(results))]
    scaling = _scaling_svg(results)
    if scaling:
        plots.append(("Thread scaling: p50 latency (ms) by thread count", scaling))
    plots.append(("History over releases: p50 latency (ms)", _history_svg(history or results)))
    return TEMPLATE.render(results=results, comparisons=comparisons, plots=plots,
                           generated=generated)


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


def _history_svg(history: list[BenchResult]) -> str:
    series: dict[tuple, list[BenchResult]] = defaultdict(list)
    for r in history:
        series[(r.device, r.app, r.config.get("threads"))].append(r)
    fig, ax = plt.subplots(figsize=(7, 4))
    for (device, app, threads), runs in series.items():
        ax.plot(range(len(runs)), [r.latency.p50_ms for r in runs], marker="o",
                label=f"{device} {app} {threads}t")
        for i, r in enumerate(runs):
            ax.annotate(r.release[:6], (i, r.latency.p50_ms), fontsize=6,
                        textcoords="offset points", xytext=(0, 4), ha="center")
    _scale(ax, [r.latency.p50_ms for r in history])
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("run (oldest → newest)")
    ax.set_ylabel("p50 ms")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _svg(fig)
