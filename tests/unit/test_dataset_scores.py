"""A release's dataset score as `releases`, `bench` and the bench report show it: read from the
device's journal (`scored` events), which the device could have written anything into — only
a plain metric name and finite figures in range count."""

import json
import math

import pydantic
import pytest

from edgekit.cli import render
from edgekit.device.releases import ReleaseInfo, dataset_score
from edgekit.models.bench import BenchResult
from edgekit.models.dataset import DatasetScore
from edgekit.report.bench_html import render_report
from tests.fixtures.bench_results import result

pytestmark = pytest.mark.unit

SCORED = {"ts": 1, "event": "scored", "release": "r1", "metric": "top1",
          "reference_score": 0.98, "measured": 0.975, "drop": 0.005}


def test_a_scored_event_as_the_gate_writes_it_is_read():
    score = dataset_score(SCORED)
    assert score == DatasetScore(metric="top1", reference_score=0.98, measured=0.975,
                                 drop=0.005)
    assert str(score) == "top1 0.9750 (ref 0.9800)"
    assert str(dataset_score({**SCORED, "metric": "my.metrics:f1", "measured": 1})) == \
        "my.metrics:f1 1.0000 (ref 0.9800)"


@pytest.mark.parametrize("change", [
    {"metric": "top1[red]x"}, {"metric": ""}, {"metric": "a" * 101}, {"metric": 1},
    {"measured": math.nan}, {"measured": math.inf}, {"drop": 1e13}, {"measured": "0.9"},
    {"measured": True}, {"reference_score": None}, {"event": "validated"}])
def test_a_scored_event_edgekit_did_not_write_is_left_out(change):
    assert dataset_score({**SCORED, **change}) is None
    assert dataset_score(json.loads(json.dumps({**SCORED, **change}))) is None


def test_a_stored_bench_result_with_a_nan_score_is_refused():
    stored = json.loads(result([1.0, 1.1]).model_dump_json())
    stored["dataset"] = {"metric": "top1", "reference_score": 0.9, "measured": float("nan"),
                         "drop": 0.0}
    with pytest.raises(pydantic.ValidationError):
        BenchResult.model_validate(stored)


def scored(r, measured=0.975):
    return r.model_copy(update={"dataset": dataset_score({**SCORED, "measured": measured})})


def test_releases_show_the_score_only_where_a_gate_scored(narrow):
    plain = ReleaseInfo("r0", 0.0, False, "host", "2026-01-01T00:00:00+00:00")
    render.releases_table("pi-1", "digits", [plain])
    assert "score" not in narrow.getvalue()
    render.releases_table("pi-1", "digits", [
        ReleaseInfo("r1", 0.0, True, "host", "2026-01-02T00:00:00+00:00",
                    dataset_score(SCORED)), plain])
    text = narrow.getvalue()
    assert "dataset score" in text and "top1 0.9750 (ref" in text


def test_bench_tables_show_the_score_beside_the_latency(narrow):
    render.bench_table([scored(result([1.0, 1.1, 1.2]))])
    text = narrow.getvalue()
    assert "dataset score" in text and "top1 0.9750" in text and "1.100 /" in text


def test_the_bench_report_has_a_score_column_and_plots_score_against_latency():
    runs = [scored(result([1.0, 1.1, 1.2], release="r1", id="a"), 0.98),
            scored(result([0.5, 0.6, 0.7], release="r2", id="b"), 0.33),
            result([0.9, 1.0], release="r3", id="c")]
    html = render_report(runs, [], runs, "now")
    assert "<th>dataset score (ref)</th>" in html
    assert '<td class="score">top1 0.9800 (0.9800)</td>' in html
    assert '<td class="score">top1 0.3300 (0.9800)</td>' in html
    assert '<td class="score">-</td>' in html
    titles = [p.split("</figcaption>")[0] for p in html.split("<figcaption>")[1:]]
    assert titles[-1].startswith("Dataset score on the device against p50 latency")
    assert f'data-plots-expected="{len(titles)}"' in html
    unscored = render_report(runs[2:], [], runs[2:], "now")
    assert "Dataset score on the device" not in unscored
