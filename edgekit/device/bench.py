"""`edgekit bench`: iree-benchmark-module on the device (bench shim), one call per repetition
so the samples are per-call latencies, with the device's conditions before and after.

Statistics are computed here with numpy; a run under heavy load, throttling, heat or with a
spread too wide to trust is kept but marked unreliable, with the reason.
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.config.address import safe_name
from edgekit.device import layout
from edgekit.device.answers import ascii_int, finite_float
from edgekit.config.devices import device_label
from edgekit.config.profiles import Target
from edgekit.device.deploy import deploy_bundle, preflight_target
from edgekit.device.history import store
from edgekit.device.probe import SHIMS, probe
from edgekit.device.provision import needs_provisioning, provision, shim_version
from edgekit.device.releases import current_release, release_scores, verify_release
from edgekit.device.trust import check_signature
from edgekit.errors import (BundleError, ConfigError, DeviceAnswerRefused, RemoteCommandFailed,
                            printable)
from edgekit.models.bench import BenchResult, Conditions, LatencyStats
from edgekit.models.bundle import MANIFEST, Bundle, Manifest, load_bundle
from edgekit.toolchain.iree import runtime_flags
from edgekit.toolchain.versions import package_version
from edgekit.transport import open_device
from edgekit.transport.base import Transport

BUSY_PCT = 30.0               # CPU busy share right before a run above which timings are suspect
HOT_C = 80.0
MAX_CONDITION_ITEMS = 256    # CPUs' frequencies and governors, thermal zones
UNSTABLE_ROUNDS_CV = 0.10     # spread of per-round medians / their mean
NOISY_CALLS_CV = 0.30          # per-call spread (single-round runs only: tails are normal)


@dataclass(frozen=True)
class BenchOptions:
    hosts: tuple[str, ...]
    app: str | None = None
    bundle: Path | None = None      # deploy this bundle first, then bench it
    # None: the configuration the bundle runs in (its tuned driver and thread count; untuned:
    # one thread); given, each count is measured (an explicit choice wins over the tuned one)
    threads: tuple[int, ...] | None = None
    repetitions: int = 50           # measured calls per configuration, over all rounds
    warmup: int = 5                 # calls dropped at the start of each round
    rounds: int = 5                 # separate benchmark processes, interleaved across configs
    identity: Path | None = None
    allow_unsigned: bool = False    # deploy --bundle even if unsigned/untrusted (journaled)


def run_bench(options: BenchOptions,
              on_progress: Callable[[str, int, int], None] | None = None) -> list[BenchResult]:
    """Bench every host × thread count; results are also stored in the local history."""
    if (options.app is None) == (options.bundle is None):
        raise ConfigError("give exactly one of --app or --bundle", key="app")
    if options.rounds < 1 or options.repetitions < 2 * options.rounds or options.warmup < 0 \
            or (options.threads is not None
                and (not options.threads or min(options.threads) < 1)):
        raise ConfigError("need rounds >= 1, repetitions >= 2 per round, warmup >= 0, "
                          "threads >= 1", key="bench")
    bundle = load_bundle(options.bundle) if options.bundle else None
    try:
        return _bench_hosts(options, bundle, on_progress)
    finally:
        if bundle is not None:
            bundle.release()                       # a .tar's extraction


def _bench_hosts(options: BenchOptions, bundle: Bundle | None,
                 on_progress: Callable[[str, int, int], None] | None) -> list[BenchResult]:
    if bundle:  # refused before any device is touched (deploy_bundle checks again)
        bundle.verify()
        check_signature(bundle, options.allow_unsigned)
    app = safe_name(bundle.manifest.app if bundle else options.app, "app")
    total = len(options.hosts) * len(options.threads or (1,)) * options.rounds
    if len(options.hosts) > 1:
        # every device answers before the first one's rounds (minutes) begin
        for host in options.hosts:
            if on_progress:
                on_progress(f"{host}: connecting", 0, total)
            with open_device(host, options.identity) as conn:
                if bundle is not None:
                    preflight_target(conn, Target.model_validate(
                        bundle.manifest.target_profile))
    done = 0
    results: list[BenchResult] = []
    for host in options.hosts:
        with open_device(host, options.identity) as conn:
            info = probe(conn)
            if needs_provisioning(info):
                provision(conn, info)
            release = deploy_bundle(conn, bundle, allow_unsigned=options.allow_unsigned).release \
                if bundle else current_release(conn, app)
            if release is None:
                raise ConfigError(f"app {app!r} has no current release on {conn.where}",
                                  key="app",
                                  hint="deploy it first, or pass --bundle")
            # corruption on the device shows as a sha256 mismatch, not as an IREE error
            verify_release(conn, app, release, layout.shims_dir(shim_version()))
            manifest = remote_manifest(conn, app, release)
            scored = release_scores(conn, app).get(release)   # shown beside its latency
            configs = run_configs(manifest, options.threads)
            per_round = -(-options.repetitions // options.rounds)
            runs: dict[tuple[int, str], list[RoundRun]] = {c: [] for c in configs}
            # one round's `after` is the next one's `before`: the rounds run back to back, and
            # each read samples the CPUs for half a second (two reads a round cost 1 s idle)
            last: Conditions | None = None
            # rounds interleave the configurations, so drift on the device hits all alike
            for round_index in range(options.rounds):
                for threads, driver in configs:
                    if on_progress:
                        on_progress(f"{device_label(host)}: {threads} thread(s), round "
                                    f"{round_index + 1}/{options.rounds}", done, total)
                    config = RoundConfig(repetitions=per_round, threads=threads,
                                         warmup=options.warmup, driver=driver)
                    run = bench_round(conn, info.arch, release, manifest, config, before=last)
                    runs[(threads, driver)].append(run)
                    last = run.after
                    done += 1
            for threads, driver in configs:
                result = summarize(conn, info.arch, app, release, manifest, threads,
                                   runs[(threads, driver)], options, device=device_label(host),
                                   driver=driver)
                result = result.model_copy(update={"dataset": scored})
                store(result)
                results.append(result)
    if on_progress:
        on_progress("done", total, total)
    return results


def run_configs(manifest: Manifest, threads: tuple[int, ...] | None
                ) -> tuple[tuple[int, str], ...]:
    """(threads, driver) per configuration to measure. None: the one the release runs in —
    its manifest's driver and tuned worker count (`edgekit tune`'s choice: local-sync for one
    thread), one thread when untuned. Explicit counts win: the tuned count keeps the tuned
    driver, another count runs on the profile's driver (local-task with that many workers,
    also for a build tuned to local-sync). A Vulkan module's speed does not depend on CPU
    threads: one configuration."""
    driver = manifest.runtime_driver
    if driver == "vulkan":
        return ((1, driver),)
    tuned = manifest.runtime_threads or (1 if driver == "local-sync" else None)
    if threads is None:
        return ((tuned or 1, driver),)
    profile = str(manifest.target_profile.get("runtime", {}).get("driver", driver))
    configs = []
    for t in dict.fromkeys(threads):
        other = profile if profile == "local-task" else driver
        config = (t, driver) if t == tuned else (t if other == "local-task" else 1, other)
        if config not in configs:
            configs.append(config)
    return tuple(configs)


def remote_manifest(conn: Transport, app: str, release: str) -> Manifest:
    """The manifest of a release on the device."""
    path = f"{layout.release_dir(app, release)}/{MANIFEST}"
    text = conn.read_text(path)
    if text is None:
        raise RemoteCommandFailed(f"release {release} of {app} has no {MANIFEST} on the device",
                                  where=conn.where, argv=["read", path], returncode=2,
                                  stderr_tail="")
    try:
        return Manifest.model_validate_json(text)
    except ValueError as exc:
        raise BundleError(f"the release's {MANIFEST} is malformed: {str(exc).splitlines()[0]}",
                          where=f"{conn.where}:{path}") from None


@dataclass(frozen=True)
class RoundRun:
    samples_ms: list[float]
    peak_rss_kb: int
    before: Conditions
    after: Conditions


@dataclass(frozen=True)
class RoundConfig:
    """How one benchmark process runs: `warmup` + `repetitions` samples on `threads`, each
    one call (or the mean of `calls_per_sample` calls, for calls too short to time one by
    one). The device's conditions are read before and after unless `conditions` is False
    (each read takes half a second of sampling). `driver` runs the release on another runtime
    driver than its manifest's (the tuner trying local-sync for one thread)."""

    repetitions: int
    threads: int = 1
    warmup: int = 5
    conditions: bool = True
    calls_per_sample: int = 1
    driver: str | None = None

    def __post_init__(self) -> None:
        if self.repetitions < 1 or self.threads < 1 or self.warmup < 0 \
                or self.calls_per_sample < 1:
            raise ConfigError(f"invalid benchmark round {self}", key="bench",
                              hint="need repetitions, threads and calls_per_sample >= 1 and "
                                   "warmup >= 0")


def bench_round(conn: Transport, arch: str, release: str, manifest: Manifest,
                config: RoundConfig, before: Conditions | None = None) -> RoundRun:
    """One benchmark process of `release` (of `manifest`'s app) on the device. `before`: the
    conditions just read there (the previous round's `after`), not read again."""
    app = safe_name(manifest.app, "app")
    shims = layout.shims_dir(shim_version())
    runtime = layout.runtime_dir(manifest.compiler_version, arch)
    if before is None or not config.conditions:
        before = read_conditions(conn) if config.conditions else Conditions()
    flags = [f"--benchmark_repetitions={config.repetitions + config.warmup}",
             f"--benchmark_min_time={config.calls_per_sample}x"]
    driver = config.driver or manifest.runtime_driver
    if driver == "local-task":
        flags.append(f"--task_topology_group_count={config.threads}")
    # bench.sh reads EDGEKIT_DRIVER before the release's run.env DRIVER
    env = [] if driver == manifest.runtime_driver else \
        ["env", f"EDGEKIT_DRIVER={safe_name(driver, 'driver')}"]
    result = conn.run([*env, "sh", f"{shims}/bench.sh", runtime,
                       layout.release_dir(app, release), *flags], check=False, timeout=3600)
    after = read_conditions(conn) if config.conditions else Conditions()
    if result.returncode != 0:
        raise RemoteCommandFailed("iree-benchmark-module failed", where=conn.where,
                                  argv=["bench.sh", *flags], returncode=result.returncode,
                                  stderr_tail=result.stderr.decode(errors="replace")[-3000:])
    samples = per_call_ms(benchmark_json(result.stdout, conn.where))[config.warmup:]
    return RoundRun(samples, _peak_rss(result.stderr), before, after)


def summarize(conn: Transport, arch: str, app: str, release: str, manifest: Manifest,
              threads: int, rounds: list[RoundRun], options: BenchOptions,
              device: str | None = None, driver: str | None = None) -> BenchResult:
    latency = latency_stats([s for r in rounds for s in r.samples_ms],
                            [float(np.median(r.samples_ms)) for r in rounds])
    before, after = rounds[0].before, rounds[-1].after
    reasons = merged_reasons([(r.before, r.after) for r in rounds], latency)
    now = datetime.datetime.now(datetime.timezone.utc)
    return BenchResult(
        id=f"{now:%Y%m%dT%H%M%S}-{secrets.token_hex(3)}",
        created_at=now.isoformat(timespec="seconds"),
        device=device or conn.where, device_arch=arch, app=app, release=release,
        target=manifest.target,
        # the driver and the runtime flags the rounds ran with (what a user can re-run)
        config={"threads": threads, "driver": driver or manifest.runtime_driver,
                "flags": " ".join(runtime_flags(driver or manifest.runtime_driver, threads)),
                "repetitions": options.repetitions, "warmup": options.warmup,
                "rounds": len(rounds)},
        latency=latency, peak_rss_kb=max(r.peak_rss_kb for r in rounds), before=before,
        after=after, reliable=not reasons, unreliable_reasons=tuple(reasons),
        versions={"edgekit": package_version("edgekit"),
                  "iree_runtime": manifest.compiler_version})


# A call's time as a device may report it: finite, above zero, under a day (the device is not
# trusted: a NaN or 1e999 stored once would break every later `bench` view)
MAX_CALL_MS = 86_400_000.0
_TIME_SCALE = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def benchmark_json(stdout: bytes, where: str) -> dict:
    """iree-benchmark-module's --benchmark_format=json report, or DeviceAnswerRefused."""
    try:
        report = json.loads(stdout)
    except ValueError as exc:
        raise DeviceAnswerRefused(f"the benchmark's report is not JSON ({exc})", where=where,
                                  hint="run bench.sh on the device by hand to see what it "
                                       "prints") from None
    if not isinstance(report, dict):
        raise DeviceAnswerRefused("the benchmark's report is not a JSON object", where=where)
    return report


def per_call_ms(report: dict, where: str = "bench") -> list[float]:
    """Per-repetition times from google-benchmark JSON (one call each), in ms; a time that is
    not a finite number in (0, a day] is DeviceAnswerRefused."""
    runs = report.get("benchmarks", [])
    samples = []
    for b in runs if isinstance(runs, list) else ():
        if not isinstance(b, dict) or b.get("run_type") != "iteration":
            continue
        unit = b.get("time_unit", "ns")
        value = finite_float(b.get("real_time"), 0.0, MAX_CALL_MS / _TIME_SCALE.get(unit, 1.0))
        if unit not in _TIME_SCALE or value is None or value <= 0:
            raise DeviceAnswerRefused(
                f"the benchmark reported a call time of {printable(repr(b.get('real_time')))[:40]}"
                f" {printable(str(unit))[:8]}: not a time (finite, above 0, under a day)",
                where=where, hint="run bench.sh on the device by hand to see what it prints")
        samples.append(value * _TIME_SCALE[unit])
    return samples


def latency_stats(samples_ms: list[float], round_p50_ms: list[float] = ()) -> LatencyStats:
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise RemoteCommandFailed("the benchmark reported no samples", where="bench",
                                  argv=[], returncode=1, stderr_tail="")
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return LatencyStats(samples_ms=tuple(round(float(x), 6) for x in a),
                        round_p50_ms=tuple(round(float(x), 6) for x in round_p50_ms),
                        min_ms=float(a.min()), p50_ms=float(p50), p90_ms=float(p90),
                        p99_ms=float(p99), max_ms=float(a.max()), mean_ms=float(a.mean()),
                        stddev_ms=float(a.std(ddof=1)) if a.size > 1 else 0.0,
                        throughput_per_s=float(1e3 / a.mean()))


def parse_conditions(text: str) -> Conditions:
    fields: dict = {"freq_khz": {}, "governor": {}, "temp_c": {}}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        # the device is not trusted: numbers within what they can be, words short and
        # printable, a bounded number of CPUs and sensors; anything else is "not said"
        name = printable(key.split(".", 1)[-1])[:32]
        if key == "loadavg":
            loads = [finite_float(v, 0.0, 1e6) for v in value.split()[:3]]
            if len(loads) == 3 and None not in loads:
                fields["loadavg"] = tuple(loads)
        elif key == "cpu_busy_pct" and finite_float(value, 0.0, 100.0) is not None:
            fields[key] = finite_float(value, 0.0, 100.0)
        elif key in ("cores", "mem_available_kb") and ascii_int(value, 1 << 50) is not None:
            fields[key] = ascii_int(value, 1 << 50)
        elif key.startswith("freq_khz.") and ascii_int(value, 1 << 32) is not None:
            if len(fields["freq_khz"]) < MAX_CONDITION_ITEMS:
                fields["freq_khz"][name] = ascii_int(value, 1 << 32)
        elif key.startswith("governor."):
            if len(fields["governor"]) < MAX_CONDITION_ITEMS:
                fields["governor"][name] = printable(value)[:32]
        elif key.startswith("temp_mc.") and finite_float(value, -300_000, 300_000) is not None:
            if len(fields["temp_c"]) < MAX_CONDITION_ITEMS:
                fields["temp_c"][name] = int(finite_float(value, -300_000, 300_000)) / 1000
        elif key == "throttled":
            # vcgencmd get_throttled's word (0x50005); anything else is shown as unreadable
            fields["throttled"] = value if ascii_int(value, 0xFFFFFFFF, base=16) is not None \
                else "unreadable"
    return Conditions.model_validate(fields)


def read_conditions(conn: Transport) -> Conditions:
    script = (SHIMS / "conditions.sh").read_bytes()  # on stdin: works on any device
    return parse_conditions(conn.run(["sh", "-s"], stdin=script).text)


def merged_reasons(conditions: list[tuple[Conditions, Conditions]],
                   latency: LatencyStats) -> list[str]:
    """Each kind of reason once over the rounds (before, after each): the worst round's words
    (the busiest, for load), with how many rounds it held in when more than one."""
    found: dict[str, list[tuple[float, str]]] = {}
    for before, after in conditions:
        for reason in unreliable_reasons(before, after, latency):
            kind = reason.split(":", 1)[0].split(" (", 1)[0]
            found.setdefault(kind, []).append((before.cpu_busy_pct, reason))
    reasons = []
    for seen in found.values():   # the spread reasons are the whole run's: said once
        worst = max(seen, key=lambda s: s[0])[1]
        if len(seen) > 1 and not worst.startswith(("unstable", "noisy")):  # per round
            worst += f" (in {len(seen)} of {len(conditions)} rounds)"
        reasons.append(worst)
    return reasons


def unreliable_reasons(before: Conditions, after: Conditions, latency: LatencyStats) -> list[str]:
    reasons = []
    if before.cpu_busy_pct > BUSY_PCT:
        reasons.append(f"heavy load: CPUs {before.cpu_busy_pct:.0f}% busy before the run "
                       f"(load average {before.loadavg[0]:.2f})")
    for c in (before, after):
        if c.throttled and c.throttled not in ("0x0", "0"):
            reasons.append(f"throttled (vcgencmd get_throttled={c.throttled})")
            break
    hottest = max([*before.temp_c.values(), *after.temp_c.values()], default=0.0)
    if hottest >= HOT_C:
        reasons.append(f"hot: {hottest:.0f} °C")
    slow = [cpu for cpu, khz in after.freq_khz.items() if cpu in before.freq_khz
            and khz < 0.8 * before.freq_khz[cpu]]
    if slow:
        reasons.append(f"CPU frequency dropped during the run on {', '.join(slow)}")
    rounds = np.asarray(latency.round_p50_ms)
    if rounds.size >= 2 and rounds.mean() > 0:
        cv = float(rounds.std(ddof=1) / rounds.mean())
        if cv > UNSTABLE_ROUNDS_CV:
            reasons.append(f"unstable: the rounds' medians spread {cv:.0%} of their mean")
    elif latency.mean_ms > 0 and latency.stddev_ms / latency.mean_ms > NOISY_CALLS_CV:
        reasons.append(f"noisy: per-call spread {latency.stddev_ms / latency.mean_ms:.0%} of "
                       "the mean")
    return reasons


def _peak_rss(stderr: bytes) -> int:
    for line in reversed(stderr.decode(errors="replace").splitlines()):
        if line.startswith("edgekit-peak-rss-kb="):
            return ascii_int(line.split("=", 1)[1], 1 << 40) or 0
    return 0


