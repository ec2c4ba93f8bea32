"""Benchmark history ($EDGEKIT_HOME/bench/<id>.json) and comparisons that know the noise.

A change is called a regression (or improvement) by edgekit's one rule (edgekit/speed.py): the
two runs are unpaired, so their p50s compare with a band from each run's spread between its
benchmark processes (the per-round medians; the calls of a single round otherwise), and at
least 3%.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgekit import speed
from edgekit.config.paths import edgekit_home
from edgekit.errors import ConfigError, DeviceAnswerRefused, printable
from edgekit.models.bench import BenchResult, Comparison

MIN_NOISE_PCT = 3.0


def history_dir() -> Path:
    return edgekit_home() / "bench"


def unusable_figures(result: BenchResult) -> list[str]:
    """The figures of a result that no measurement gives: NaN, infinite, negative, or a
    latency of zero. A result holding one would break every view that does arithmetic on it
    (history, compare, report): it is refused when stored and skipped when read."""
    bad = []

    def walk(value, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        elif isinstance(value, float) and not math.isfinite(value):
            bad.append(f"{path} = {value}")
    walk(result.latency.model_dump(), "latency")
    walk(result.before.model_dump(), "before")
    walk(result.after.model_dump(), "after")
    lat = result.latency
    if not bad and not (0 < lat.min_ms <= lat.p50_ms <= lat.max_ms and lat.stddev_ms >= 0
                        and lat.throughput_per_s > 0):
        bad.append(f"latency min {lat.min_ms} / p50 {lat.p50_ms} / max {lat.max_ms} ms")
    if result.peak_rss_kb < 0:
        bad.append(f"peak_rss_kb = {result.peak_rss_kb}")
    return bad


def store(result: BenchResult) -> Path:
    bad = unusable_figures(result)
    if bad:
        raise DeviceAnswerRefused(
            f"benchmark result {result.id} not stored: {'; '.join(bad)[:300]}",
            where=result.device, hint="the device reported figures no measurement gives; "
                                      "check its IREE tools and run the benchmark again")
    directory = history_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(path)
    return path


def load_history(notes: list[str] | None = None) -> list[BenchResult]:
    """Every stored result, oldest first. A file that is not a usable result (unreadable,
    malformed, or holding NaN/inf figures from before they were refused) is skipped, and a
    line saying so is added to `notes`: one bad record never breaks the views."""
    directory = history_dir()
    if not directory.is_dir():
        return []
    results = []
    for path in directory.glob("*.json"):
        try:
            result = BenchResult.model_validate(json.loads(path.read_bytes()))
            bad = unusable_figures(result)
        except (OSError, ValueError) as exc:   # pydantic's ValidationError is a ValueError
            bad = [printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)]
        if bad:
            if notes is not None:
                notes.append(f"skipped {path}: {'; '.join(bad)[:200]}")
            continue
        results.append(result)
    return sorted(results, key=lambda r: (r.created_at, r.id))


def get(result_id: str) -> BenchResult:
    for result in load_history():
        if result.id == result_id:
            return result
    raise ConfigError(f"no benchmark result {result_id!r}", key="id",
                      hint="`edgekit bench history` lists them")


def series_key(r: BenchResult) -> tuple:
    """Device, app, threads and kind of driver. local-sync and local-task both run on the CPU:
    a release tuned for one thread ships local-sync (edgekit tune), and comparing it with the
    previous local-task release at one thread is the point of benchmarking it."""
    driver = r.config.get("driver")
    return (r.device, r.app, r.config.get("threads"),
            "cpu" if driver in ("local-sync", "local-task") else driver)


def _same_series(a: BenchResult, b: BenchResult) -> bool:
    return series_key(a) == series_key(b)


def previous_release_result(new: BenchResult, history: list[BenchResult]) -> BenchResult | None:
    """The latest result of the same device, app and configuration on another release."""
    older = [r for r in history if _same_series(r, new) and r.release != new.release
             and (r.created_at, r.id) < (new.created_at, new.id)]
    return older[-1] if older else None


def _rounds(latency) -> tuple[float, ...]:
    """What a run's spread is measured from: its per-round medians, or with one round its
    calls (the spread within one process)."""
    return latency.round_p50_ms if len(latency.round_p50_ms) >= 2 else \
        (latency.samples_ms or (latency.p50_ms,))


def compare(base: BenchResult, new: BenchResult) -> Comparison:
    a, b = base.latency, new.latency
    found = speed.verdict(speed.PairedRounds(base=_rounds(a), new=_rounds(b), paired=False,
                                             medians=(a.p50_ms, b.p50_ms)),
                          bar=MIN_NOISE_PCT / 100)
    delta = 100 * (b.p50_ms - a.p50_ms) / a.p50_ms
    return Comparison(device=new.device, app=new.app,
                      base_device=base.device if base.device != new.device else "",
                      config=dict(new.config), base=base.id,
                      new=new.id, base_release=base.release, new_release=new.release,
                      base_p50_ms=a.p50_ms, new_p50_ms=b.p50_ms, delta_pct=round(delta, 2),
                      noise_pct=round(100 * found.band, 2),
                      regression=found.call == speed.SLOWER,
                      improvement=found.call == speed.FASTER,
                      base_dataset=base.dataset, new_dataset=new.dataset)


def differences(base: BenchResult, new: BenchResult) -> list[str]:
    """What makes two results measure different things (device, app, target, threads,
    driver): each as `what: base vs new`. Empty: they are comparable."""
    found = []
    for what, a, b in (("device", base.device, new.device), ("app", base.app, new.app),
                       ("target", base.target, new.target),
                       ("threads", base.config.get("threads"), new.config.get("threads")),
                       ("driver", series_key(base)[3], series_key(new)[3])):
        if a != b:
            found.append(f"{what} {a} vs {b}")
    return found


def compare_latest(notes: list[str] | None = None) -> list[Comparison]:
    """For each series' newest result: against the newest result of its previous release
    (`notes`: see load_history)."""
    history = load_history(notes)
    newest: dict[tuple, BenchResult] = {}
    for r in history:
        newest[series_key(r)] = r
    comparisons = []
    for r in newest.values():
        base = previous_release_result(r, history)
        if base is not None:
            comparisons.append(compare(base, r))
    return comparisons
