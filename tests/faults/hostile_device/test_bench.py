"""Benchmark figures and conditions from a device that lies: a NaN or 1e999 call time is
refused before it is stored; a stored bad result (from before) is skipped with a note and
`bench history`, `compare` and `report` keep working; a `throttled=` word with markup or
escapes is read as "unreadable", and nothing raw reaches the terminal."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.device.bench import BenchOptions, run_bench
from edgekit.device.deploy import deploy_bundle
from edgekit.device.history import history_dir, load_history
from edgekit.errors import DeviceAnswerRefused
from tests.faults.hostile_device.conftest import replace_tool
from tests.local.conftest import APP

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit", *args], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def lying_benchmark(value: str) -> str:
    """iree-benchmark-module printing google-benchmark JSON with `value` as each time."""
    runs = ",".join(f'{{"run_type": "iteration", "real_time": {value}, "time_unit": "ms"}}'
                    for _ in range(8))
    return f"cat <<'JSON'\n{{\"benchmarks\": [{runs}]}}\nJSON\n"


@pytest.mark.parametrize("value", ["NaN", "1e999", "-Infinity", "-3", "\"fast\""])
def test_a_call_time_no_measurement_gives_is_refused_before_it_is_stored(make_device, v1,
                                                                         value):
    device = make_device()
    deploy_bundle(device, v1)
    replace_tool(device.root, lying_benchmark(value), tool="iree-benchmark-module")
    stored = set(history_dir().glob("*.json")) if history_dir().is_dir() else set()
    with pytest.raises(DeviceAnswerRefused, match="not a time") as err:
        run_bench(BenchOptions(hosts=(f"local:{device.root}",), app=APP, threads=(1,),
                               repetitions=4, warmup=1, rounds=1))
    assert err.value.exit_code == 15
    assert (set(history_dir().glob("*.json")) if history_dir().is_dir() else set()) == stored


def test_a_stored_bad_result_is_skipped_with_a_note_and_every_view_works(make_device, v1,
                                                                         tmp_path,
                                                                         monkeypatch):
    device = make_device()
    deploy_bundle(device, v1)
    [good] = run_bench(BenchOptions(hosts=(f"local:{device.root}",), app=APP, threads=(1,),
                                    repetitions=4, warmup=1, rounds=1))
    # a history of the good result and three bad records alone, in a home of this test's (the
    # session's home holds other tests' series, and they must not meet these records)
    home = tmp_path / "home"
    (home / "bench").mkdir(parents=True)
    home.chmod(0o700)
    record = json.loads((history_dir() / f"{good.id}.json").read_text())
    monkeypatch.setenv("EDGEKIT_HOME", str(home))
    (history_dir() / f"{good.id}.json").write_text(json.dumps(record))
    record["id"] = "bad-nan"
    record["latency"]["p50_ms"] = float("nan")
    (history_dir() / "bad-nan.json").write_text(json.dumps(record))       # NaN, as json writes
    (history_dir() / "bad-1e999.json").write_text(
        json.dumps(record).replace("NaN", "1e999"))
    (history_dir() / "torn.json").write_text("{\"id\": ")
    notes: list[str] = []
    assert good.id in [r.id for r in load_history(notes)] and len(notes) == 3
    for args in (["bench", "history"], ["bench", "compare"],
                 ["bench", "report", "--html", str(tmp_path / "r.html")]):
        run = cli(*args)
        assert run.returncode == 0, (args, run.stderr)
        assert run.stderr.count("edgekit: skipped ") == 3, (args, run.stderr)
        assert "Traceback" not in run.stderr


def test_a_throttled_word_with_markup_is_unreadable_and_nothing_raw_is_shown(make_device, v1,
                                                                           tmp_path):
    device = make_device()
    deploy_bundle(device, v1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vcgencmd = bin_dir / "vcgencmd"     # the device's own tool, on its PATH
    vcgencmd.write_text("#!/bin/sh\nprintf 'throttled=[/][bold]\\033[2J\\n'\n")
    vcgencmd.chmod(vcgencmd.stat().st_mode | stat.S_IXUSR)
    run = cli("bench", "run", f"local:{device.root}", "--app", APP, "--threads", "1",
              "--repetitions", "4", "--warmup", "1", "--rounds", "1",
              env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert run.returncode == 0, run.stderr
    assert "\x1b" not in run.stdout + run.stderr
    assert "throttled (vcgencmd get_throttled=unreadable)" in run.stdout.replace("\n", " ")
