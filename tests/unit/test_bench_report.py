"""The bench report's history plot: drawn when a configuration has runs to compare, a line
saying when it will appear otherwise (one point per line was an empty axis, labels on top
of each other)."""

import pytest

from edgekit.report.bench_html import render_report
from tests.fixtures.bench_results import result

pytestmark = pytest.mark.unit


def figures(html: str) -> list[str]:
    return [part.split("</figcaption>")[0] for part in html.split("<figcaption>")[1:]]


def test_one_run_per_configuration_says_when_the_history_plot_appears():
    html = render_report([result([1.0, 1.1, 1.2])], [], [], "now")
    assert not any(title.startswith("History") for title in figures(html))
    assert "the plot appears after a second run" in html
    assert 'data-plots-expected="1"' in html


def test_two_runs_of_a_configuration_draw_the_history():
    runs = [result([1.0, 1.1, 1.2], release="r1", id="a"),
            result([0.9, 1.0, 1.1], release="r2", id="b")]
    html = render_report(runs[1:], [], runs, "now")
    assert any(title.startswith("History") for title in figures(html))
    assert "the plot appears after a second run" not in html
