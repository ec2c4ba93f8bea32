"""Self-contained HTML report of `edgekit bisect`: the error profile along the network as a table
and an inline-SVG plot (matplotlib, as the benchmark report draws its plots), per level."""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgekit.report.bench_html import TEMPLATES, _svg, plt


@dataclass(frozen=True)
class ProfileRow:
    label: str               # module path
    op: str
    max_abs_error: float
    cosine: float | None
    ok: bool
    fp32_max_abs_error: float | None = None   # a quantized build: against the float model


def render_bisect(title: str, summary: list[str],
                  levels: list[tuple[str, list[ProfileRow]]]) -> str:
    plots = [(f"{name}: max abs error per tap (log scale; red: beyond tolerance)",
              _profile_svg(rows)) for name, rows in levels]
    return TEMPLATES.get_template("bisect.html.j2").render(
        title=title, summary=summary, levels=levels, plots=plots)


def _finite(v: float | None) -> float:
    return v if v is not None and math.isfinite(v) and v > 0 else float("nan")


def _profile_svg(rows: list[ProfileRow]) -> str:
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(rows)), 3.6))
    xs = list(range(len(rows)))
    ax.plot(xs, [_finite(r.max_abs_error) for r in rows], "-", color="#888", zorder=1)
    ax.scatter(xs, [_finite(r.max_abs_error) for r in rows], zorder=2,
               c=["#070" if r.ok else "#b00" for r in rows], label="vs reference")
    if any(r.fp32_max_abs_error is not None for r in rows):
        ax.plot(xs, [_finite(r.fp32_max_abs_error) for r in rows], "--", color="#36c",
                label="vs float model")
        ax.legend(fontsize=8)
    if any(math.isfinite(_finite(r.max_abs_error)) for r in rows):
        ax.set_yscale("log")
    ax.set_xticks(xs, [f"{r.label or '(model)'}\n{r.op.removeprefix('aten.')}" for r in rows],
                  fontsize=7, rotation=60, ha="right")
    ax.set_ylabel("max abs error")
    return _svg(fig)
