"""HTML fleet view of a rollout: waves, every device's result, the dataset gate's score per
device and per release, and the latency the health gate measured on each device before and
after (per device and per board), as inline SVG."""

from __future__ import annotations

import datetime
from collections import defaultdict
from pathlib import Path

import numpy as np

from edgekit.models.dataset import DatasetScore, scores_line
from edgekit.models.fleet import FleetResult
from edgekit.report.bench_html import TEMPLATES, _scale, _svg, plt


def render_fleet_report(result: FleetResult, generated: str) -> str:
    plots = []
    measured = [d for d in result.devices if d.p90_before_ms and d.p90_after_ms]
    if measured:
        plots.append(("p90 latency (ms) per device: release replaced vs new release",
                      _before_after_svg([d.device for d in measured],
                                        [d.p90_before_ms for d in measured],
                                        [d.p90_after_ms for d in measured])))
        boards: dict[str, list] = defaultdict(list)
        for d in measured:
            boards[d.target].append(d)
        plots.append(("p90 latency (ms) per board (median over its devices)",
                      _before_after_svg(
                          list(boards),
                          [float(np.median([d.p90_before_ms for d in ds])) for ds in
                           boards.values()],
                          [float(np.median([d.p90_after_ms for d in ds])) for ds in
                           boards.values()])))
    plots.append(("Update time per device (s), by wave", _durations_svg(result)))
    scores = {release: scores_line(s) for release, s in result.release_scores().items()}
    return TEMPLATES.get_template("fleet.html.j2").render(
        r=result, plots=plots, scores=scores, score=device_score, generated=generated)


def device_score(score: DatasetScore | None) -> str:
    """A device's cell: "top1 0.9688 (0.9688)" (measured, the build's reference), or "-"."""
    if score is None:
        return "-"
    return f"{score.metric} {score.measured:.4f} ({score.reference_score:.4f})"


def write_fleet_report(result: FleetResult, path: Path) -> Path:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path.write_text(render_fleet_report(result, now))
    return path


def _before_after_svg(labels: list[str], before: list[float], after: list[float]) -> str:
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(labels)), 4))
    x = np.arange(len(labels))
    ax.bar(x - 0.2, before, 0.4, label="before (replaced release)")
    ax.bar(x + 0.2, after, 0.4, label="after (new release)")
    _scale(ax, [*before, *after])
    ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("p90 ms")
    ax.legend(fontsize=8)
    return _svg(fig)


def _durations_svg(result: FleetResult) -> str:
    devices = [d for d in result.devices if d.status not in ("skipped", "pending")] or \
        list(result.devices)
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(devices)), 4))
    colours = {"failed": "tab:red", "rolled-back": "tab:orange", "rollback-failed": "tab:red"}
    ax.bar(range(len(devices)), [d.seconds for d in devices],
           color=[colours.get(d.status, "tab:green") for d in devices])
    ax.set_xticks(range(len(devices)), [f"w{d.wave} {d.device}" for d in devices],
                  rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("seconds")
    return _svg(fig)
