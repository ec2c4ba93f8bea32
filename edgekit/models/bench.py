"""Benchmark results: one per (device, release, configuration) run, stored as JSON history."""

from __future__ import annotations

from edgekit.config.schema_base import Frozen
from edgekit.models.dataset import DatasetScore


class LatencyStats(Frozen):
    samples_ms: tuple[float, ...]      # one per measured call (warm-up calls dropped)
    round_p50_ms: tuple[float, ...] = ()  # median of each benchmark process (round)
    min_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    stddev_ms: float
    throughput_per_s: float


class Conditions(Frozen):
    loadavg: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cpu_busy_pct: float = 0.0                # all CPUs, over half a second
    cores: int = 1
    mem_available_kb: int = 0
    freq_khz: dict[str, int] = {}
    governor: dict[str, str] = {}
    temp_c: dict[str, float] = {}
    throttled: str | None = None


class BenchResult(Frozen):
    id: str
    created_at: str
    device: str
    device_arch: str
    app: str
    release: str
    target: str
    config: dict[str, int | str]           # threads, driver, repetitions, warmup
    latency: LatencyStats
    peak_rss_kb: int
    before: Conditions
    after: Conditions
    reliable: bool
    unreliable_reasons: tuple[str, ...] = ()
    versions: dict[str, str] = {}          # edgekit, iree runtime
    dataset: DatasetScore | None = None    # the release's last dataset-gate score there


class Comparison(Frozen):
    device: str                             # the new result's
    base_device: str = ""                   # the base result's, when another (--force)
    app: str
    config: dict[str, int | str]
    base: str                               # result ids
    new: str
    base_release: str
    new_release: str
    base_p50_ms: float
    new_p50_ms: float
    delta_pct: float
    noise_pct: float                        # what the measured spread lets us resolve
    regression: bool
    improvement: bool
    # each release's dataset score on the device, where its gate ran (a latency change beside
    # what it did to accuracy)
    base_dataset: DatasetScore | None = None
    new_dataset: DatasetScore | None = None
