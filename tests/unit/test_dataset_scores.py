"""A release's dataset score as `releases`, `bench`, `bench compare`, the bench report and the
fleet rollout's report show it: read from the device's journal (`scored` events) or a
rollout's, which the device or anyone could have written anything into — only a plain metric
name and finite figures in range count."""

import io
import json
import math
from pathlib import Path

import pydantic
import pytest
from rich.console import Console

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


# --- the fleet rollout's report and `bench compare` ------------------------------------------

GATE = {"metric": "top1", "reference": "fp32", "reference_score": 0.98, "measured": 0.975,
        "drop": 0.005, "samples": 64}     # what check_dataset returns into device-done


def rollout(done: dict[str, dict | None]):
    """The result a rollout's journal replays to: each device of one wave done, with the
    device-done `dataset` given (None: its gate did not run)."""
    from edgekit.config.fleet import FleetDevice, RolloutPolicy
    from edgekit.config.recipe import Hooks
    from edgekit.fleet.journal import replay, result_of
    from edgekit.models import events as ev
    from edgekit.models.fleet import RolloutPlan
    names = tuple(done)
    plan = RolloutPlan(
        id="r-1", created_at="2026-01-01T00:00:00", app="digits", recipe="r.yaml",
        fleet="f.yaml", devices=tuple(FleetDevice(name=n, address=f"local:{n}", identity="",
                                                  target="host") for n in names),
        waves=(names,), policy=RolloutPolicy(), hooks=Hooks(), bundles={"host": "b"},
        releases={"host": "rel-2"})
    events = [ev.RolloutStarted(rollout="r-1", waves=(names,)),
              ev.WaveStarted(wave=1, devices=names),
              *[e for n, dataset in done.items() for e in (
                  ev.DeviceStarted(device=n, wave=1, previous="rel-1"),
                  ev.DeviceDone(device=n, wave=1, status="updated", previous="rel-1",
                                dataset=dataset))],
              ev.WaveDone(wave=1, failed=0, halted=False), ev.Finished(status="completed")]
    return result_of(plan, replay(events), Path("journal"))


def clear(buffer):
    buffer.seek(0)
    buffer.truncate()


def test_a_rollouts_result_carries_each_devices_score_and_not_one_written_wrong():
    result = rollout({"d1": GATE, "d2": {**GATE, "measured": 0.96}, "d3": None,
                      "d4": {**GATE, "measured": float("nan")},
                      "d5": {**GATE, "metric": "<script>"}, "d6": {**GATE, "drop": "0"}})
    scores = {d.device: d.dataset for d in result.devices}
    assert scores["d1"] == DatasetScore(metric="top1", reference_score=0.98, measured=0.975,
                                        drop=0.005)
    assert scores["d2"].measured == 0.96
    assert [scores[d] for d in ("d3", "d4", "d5", "d6")] == [None] * 4
    [(release, per_device)] = result.release_scores().items()
    assert release == "rel-2" and len(per_device) == 2


def test_the_fleet_report_shows_the_score_per_device_and_per_release():
    from edgekit.report.fleet_html import render_fleet_report
    html = render_fleet_report(rollout({"d1": GATE, "d2": {**GATE, "measured": 0.96},
                                        "d3": None}), "now")
    assert "<th>dataset score (ref)</th>" in html and "<th>dataset score</th>" in html
    assert html.count('<td class="score">top1 0.9750 (0.9800)</td>') == 1
    assert html.count('<td class="score">top1 0.9600 (0.9800)</td>') == 1
    assert html.count('<td class="score">-</td>') == 1                       # d3: not gated
    assert '<td class="score">top1 0.9600–0.9750 (ref 0.9800) on 2 devices</td>' in html
    alike = render_fleet_report(rollout({"d1": GATE, "d2": None}), "now")
    assert '<td class="score">top1 0.9750 (ref 0.9800) on 1 device</td>' in alike
    unscored = render_fleet_report(rollout({"d1": None}), "now")
    assert unscored.count('<td class="score">-</td>') == 2                   # device, release


def test_the_fleet_result_in_text_says_each_releases_score(narrow, monkeypatch):
    result = rollout({"d1": GATE, "d2": None})
    render.fleet_result(result)
    assert "dataset score of rel-2: top1 0.9750 (ref 0.9800) on 1 device" in \
        " ".join(narrow.getvalue().split())
    wide = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=wide, width=400, color_system=None))
    monkeypatch.setattr(render, "wide", True)         # --wide: a column per device
    render.fleet_result(result)
    table = wide.getvalue().split("dataset score of")[0]
    assert "dataset score" in table and "top1 0.9750 (ref 0.9800)" in table
    monkeypatch.setattr(render, "wide", False)
    clear(narrow)
    render.fleet_result(rollout({"d1": None}))
    assert "dataset score" not in narrow.getvalue()


def test_bench_compare_shows_both_releases_scores_beside_the_latency(narrow):
    from edgekit.device.history import compare
    base = scored(result([1.0, 1.1, 1.2], release="r1", id="a"), 0.98)
    new = scored(result([1.0, 1.1, 1.2], release="r2", id="b"), 0.5)
    compared = compare(base, new)
    assert (compared.base_dataset.measured, compared.new_dataset.measured) == (0.98, 0.5)
    assert compared.model_dump(mode="json")["new_dataset"]["measured"] == 0.5
    render.comparison_table([compared])
    text = narrow.getvalue()
    assert "dataset score" in text and "top1 0.9800" in text and "top1 0.5000" in text
    clear(narrow)
    plain = compare(result([1.0, 1.1], id="c"), scored(result([1.0, 1.1], id="d")))
    assert plain.base_dataset is None
    render.comparison_table([plain])
    assert "- " in narrow.getvalue() and "top1 0.9750" in narrow.getvalue()
    clear(narrow)
    render.comparison_table([compare(result([1.0, 1.1], id="e"), result([1.0, 1.1], id="f"))])
    assert "score" not in narrow.getvalue()
    html = render_report([base, new], [compared], [base, new], "now")
    assert '<td class="score">top1 0.9800 → top1 0.5000</td>' in html
