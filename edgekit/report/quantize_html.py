"""Self-contained HTML of `edgekit quantize report --html`: the per-layer error of the all-int8
model against the float model (a bar per layer, the kept ones marked), the dataset score per
precision, and the tables. Drawn with the benchmark report's matplotlib helpers and base
template (inline SVG; `data-plots-rendered` set once the browser has laid the plots out)."""

from __future__ import annotations

from edgekit.report.bench_html import TEMPLATES, _svg, plt

_PAGE = """{% extends "_base.html.j2" %}
{% block title %}{{ title }}{% endblock %}
{% block content %}
<h1>{{ title }}</h1>
<p>{{ r.mode }}; {{ r.float_layers|length }} layer(s) kept float
{%- if r.metric %}; dataset metric {{ r.metric }}{% endif %}.</p>
{% if r.float_layers %}<h2>Layers kept float</h2>
<table><tr><th>layer</th><th>cosine vs fp32 (all-int8)</th>
<th>error it adds (1 - cosine)</th></tr>
{% for e in r.float_layers %}<tr><td>{{ e.layer or "(model)" }}</td>
<td>{{ fmt(e.cosine, ".4f") }}</td><td>{{ fmt(e.added, ".4f") }}</td></tr>
{% endfor %}</table>{% endif %}
{% if r.layers %}<h2>Per-layer error, all-int8 vs fp32 (worst first)</h2>
<table><tr><th>layer</th><th>cosine</th><th>added 1 - cosine</th><th>max abs error</th>
<th></th></tr>
{% for e in r.layers %}<tr><td>{{ e.layer or "(model)" }}</td>
<td>{{ fmt(e.cosine, ".4f") }}</td><td>{{ fmt(e.added, ".4f") }}</td>
<td>{{ fmt(e.max_abs_error, ".3g") }}</td>
<td class="{{ 'bad' if e.layer in kept else 'good' }}">
{{- "kept float" if e.layer in kept else "int8" }}</td></tr>
{% endfor %}</table>{% endif %}
{% if r.scores %}<h2>Dataset score per precision</h2>
<table><tr><th>precision</th><th>score</th><th>drop</th></tr>
{% for s in r.scores %}<tr><td>{{ s.precision }}</td><td>{{ fmt(s.score, ".4f") }}</td>
<td>{{ fmt(s.drop, "+.4f") }}</td></tr>
{% endfor %}</table>{% endif %}
{% for note in r.notes %}<p>{{ note }}</p>
{% endfor %}
{% endblock %}
"""


def _fmt(value, spec: str) -> str:
    return format(value, spec) if value is not None else "–"


def render_quantize_report(report) -> str:
    kept = {e.layer for e in report.float_layers}
    plots = []
    if report.layers:
        plots.append(("Error each layer adds in the all-int8 model (1 - cosine vs fp32; red: "
                      "kept float)", _layers_svg(report.layers, kept)))
    if report.scores:
        plots.append((f"Dataset score per precision ({report.metric})",
                      _scores_svg(report.scores)))
    return TEMPLATES.from_string(_PAGE).render(
        title=f"edgekit quantize report: {report.app} for {report.target}", r=report,
        kept=kept, fmt=_fmt, plots=plots)


def _layers_svg(layers, kept: set[str]) -> str:
    fig, ax = plt.subplots(figsize=(max(5, 0.4 * len(layers)), 3.4))
    xs = list(range(len(layers)))
    ax.bar(xs, [max(e.added or 0.0, 0.0) for e in layers],
           color=["#b00" if e.layer in kept else "#36c" for e in layers])
    ax.set_xticks(xs, [e.layer or "(model)" for e in layers], fontsize=7, rotation=60,
                  ha="right")
    ax.set_ylabel("added 1 - cosine")
    return _svg(fig)


def _scores_svg(scores) -> str:
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(scores)), 3.2))
    xs = list(range(len(scores)))
    ax.bar(xs, [s.score or 0.0 for s in scores], color="#36c")
    ax.set_xticks(xs, [s.precision for s in scores], fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("score")
    return _svg(fig)
