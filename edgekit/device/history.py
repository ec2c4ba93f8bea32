"""Benchmark history ($EDGEKIT_HOME/bench/<id>.json) and comparisons that know the noise.

A change is called a regression (or improvement) only when the p50 moved by more than what the
two runs' measured spread can resolve: 3 standard errors of the difference of means (at least
2%), relative to the base.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from edgekit.config.paths import edgekit_home
from edgekit.errors import ConfigError
from edgekit.models.bench import BenchResult, Comparison

MIN_NOISE_PCT = 2.0


def history_dir() -> Path:
    return edgekit_home() / "bench"


def store(result: BenchResult) -> Path:
    directory = history_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.id}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(path)
    return path


def load_history() -> list[BenchResult]:
    """Every stored result, oldest first."""
    directory = history_dir()
    if not directory.is_dir():
        return []
    results = [BenchResult.model_validate(json.loads(p.read_text()))
               for p in directory.glob("*.json")]
    return sorted(results, key=lambda r: (r.created_at, r.id))


def get(result_id: str) -> BenchResult:
    for result in load_history():
        if result.id == result_id:
            return result
    raise ConfigError(f"no benchmark result {result_id!r}", key="id",
                      hint="`edgekit bench history` lists them")


def _same_series(a: BenchResult, b: BenchResult) -> bool:
    return (a.device, a.app, a.config.get("threads"), a.config.get("driver")) == \
        (b.device, b.app, b.config.get("threads"), b.config.get("driver"))


def previous_release_result(new: BenchResult, history: list[BenchResult]) -> BenchResult | None:
    """The latest result of the same device, app and configuration on another release."""
    older = [r for r in history if _same_series(r, new) and r.release != new.release
             and (r.created_at, r.id) < (new.created_at, new.id)]
    return older[-1] if older else None


def compare(base: BenchResult, new: BenchResult) -> Comparison:
    a, b = base.latency, new.latency
    na, nb = len(a.samples_ms), len(b.samples_ms)
    se = math.sqrt(a.stddev_ms ** 2 / max(na, 1) + b.stddev_ms ** 2 / max(nb, 1))
    noise = max(MIN_NOISE_PCT, 100 * 3 * se / a.p50_ms) if a.p50_ms else MIN_NOISE_PCT
    delta = 100 * (b.p50_ms - a.p50_ms) / a.p50_ms if a.p50_ms else 0.0
    return Comparison(device=new.device, app=new.app, config=dict(new.config), base=base.id,
                      new=new.id, base_release=base.release, new_release=new.release,
                      base_p50_ms=a.p50_ms, new_p50_ms=b.p50_ms, delta_pct=round(delta, 2),
                      noise_pct=round(noise, 2), regression=delta > noise,
                      improvement=delta < -noise)


def compare_latest() -> list[Comparison]:
    """For each series' newest result: against the newest result of its previous release."""
    history = load_history()
    newest: dict[tuple, BenchResult] = {}
    for r in history:
        newest[(r.device, r.app, r.config.get("threads"), r.config.get("driver"))] = r
    comparisons = []
    for r in newest.values():
        base = previous_release_result(r, history)
        if base is not None:
            comparisons.append(compare(base, r))
    return comparisons
