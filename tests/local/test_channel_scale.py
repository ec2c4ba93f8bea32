"""bench/channel_scale.py at CI size: 20 `local:` agents polling one real nginx finish a
first rollout and a phased one (10, 50, 100 %), fetching only the files they lack."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.scale

BENCH = Path(__file__).resolve().parents[2] / "bench" / "channel_scale.py"


def test_twenty_agents_finish_a_phased_rollout_and_move_only_changed_files(tmp_path):
    spec = importlib.util.spec_from_file_location("channel_scale", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.run(20, 4, tmp_path)
    assert r["first"]["failed"] == 0, r["first"]["errors"]
    assert r["first"]["bytes"] >= 20 * r["first"]["release_bytes"]
    p = r["phased"]
    assert p["final"] == "complete" and p["devices_on_new_release"] == 20
    assert [s["percent"] for s in p["steps"]] == [10, 50, 100]
    # each device fetched the changed files once; the unchanged ones not again (what else
    # was served is the small signed index, each poll)
    assert 20 * p["changed_bytes"] <= p["bytes"] < 20 * p["release_bytes"]
