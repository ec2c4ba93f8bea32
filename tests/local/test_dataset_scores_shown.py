"""A release's dataset score where users look (issue 38): `edgekit releases` per release,
`bench` results beside their latency, `bench compare` (each release's score beside the change),
`bench report` in text, JSON and its HTML report (checked in headless Chromium) — read from the
device's journal, and left out where the device wrote it wrong. The fleet rollout's report:
tests/local/test_dataset_gate.py."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgekit.cli.main import cli
from edgekit.device.bench import BenchOptions, run_bench
from edgekit.device.deploy import deploy_bundle
from tests.fixtures import chromium
from tests.local.conftest import APP
from tests.local.test_dataset_gate import gated, host_outputs

pytestmark = pytest.mark.local

SCORE = {"metric": "top1", "reference_score": 1.0, "measured": 1.0, "drop": 0.0}


def run(*argv):
    result = CliRunner().invoke(cli, list(argv))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture
def scored_device(make_device, v1, v2, bundle_copy, tmp_path):
    """A device with v1 (no gate) and then v2 gated on 6 samples (scored 1.0) deployed."""
    rng = np.random.default_rng(3)
    samples = [(rng.standard_normal((1, 49, 10)).astype(np.float32),) for _ in range(6)]
    labels = np.array([int(np.argmax(o[0]))
                       for o in host_outputs(v2, samples, tmp_path)])
    device = make_device()
    first = deploy_bundle(device, v1)
    second = deploy_bundle(device, gated(v2, bundle_copy, samples, labels, 1.0))
    return device, first.release, second.release


def test_releases_show_each_releases_last_score_and_not_one_the_device_wrote_wrong(
        scored_device):
    device, unscored, scored = scored_device
    host = f"local:{device.root}"
    rows = {r["release"]: r for r in json.loads(run("releases", host, "--app", APP, "--json"))}
    assert rows[scored]["dataset"] == SCORE and rows[scored]["current"]
    assert rows[unscored]["dataset"] is None
    table = run("releases", host, "--app", APP, "--wide")
    assert "dataset score" in table and "top1 1.0000 (ref 1.0000)" in table
    journal = device.root / ".edgekit" / "apps" / APP / "journal.jsonl"
    journal.write_text(journal.read_text().replace('"measured": 1.0', '"measured": NaN'))
    rows = {r["release"]: r for r in json.loads(run("releases", host, "--app", APP, "--json"))}
    assert rows[scored]["dataset"] is None


def test_bench_and_its_report_show_the_score_beside_the_latency(scored_device, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))  # this test's bench history only
    device, _, scored = scored_device
    host = f"local:{device.root}"
    [result] = run_bench(BenchOptions(hosts=(host,), app=APP, threads=(1,), repetitions=4,
                                      warmup=1, rounds=2))
    assert result.release == scored and result.dataset.model_dump() == SCORE
    assert "top1 1.0000 (ref 1.0000)" in run("bench", "history", "--app", APP, "--wide")
    html = tmp_path / "report.html"
    report = json.loads(run("bench", "report", "--app", APP, "--html", str(html), "--json"))
    assert report["scores"] == [{"device": result.device, "app": APP, "release": scored,
                                 "p50_ms": result.latency.p50_ms, **SCORE}]
    assert f"{scored}: top1 1.0000 (ref 1.0000), p50" in \
        " ".join(run("bench", "report", "--app", APP, "--html", str(html)).split())
    dom = chromium.rendered_dom(html, tmp_path / "profile")
    assert chromium.plots(dom) == (2, 2)     # the distribution, the score against p50
    assert '<td class="score">top1 1.0000 (1.0000)</td>' in dom

    # back to v1 (never scored): compare says what the scored release it left had
    run("rollback", host, "--app", APP)
    [unscored] = run_bench(BenchOptions(hosts=(host,), app=APP, threads=(1,), repetitions=2,
                                        warmup=1, rounds=1))
    [compared] = json.loads(compare("--json"))
    assert (compared["base_release"], compared["new_release"]) == (scored, unscored.release)
    assert compared["base_dataset"] == SCORE and compared["new_dataset"] is None
    table = " ".join(compare("--wide").split())
    assert "dataset score" in table and "top1 1.0000 → -" in table


def compare(*argv):
    """`bench compare`: exit 0, or 9 when the two releases' latencies differ beyond their
    noise (tiny runs on a shared machine can): the scores are shown either way."""
    result = CliRunner().invoke(cli, ["bench", "compare", *argv])
    assert result.exit_code in (0, 9), result.output
    return result.stdout
