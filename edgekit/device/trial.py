"""Bundles tried on a device without deploying them: each is uploaded as a release of its app,
validated there and benchmarked on request — never activated — and the releases this trial
added are removed afterwards (what was on the device before, current or not, stays).

Used by `edgekit tune --host` (candidate variants), `edgekit build --compare-quantization
--host` (quantization variants), `edgekit bisect --host` (tapped variants) and `edgekit
quantize search --host` (mixed-precision candidates, added one by one as they are built and
scored on the bundle's labelled set there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.config.address import safe_name
from edgekit.device import layout
from edgekit.device.bench import RoundConfig, bench_round, benchmark_json
from edgekit.device.deploy import release_id, upload_release, validate_on_device
from edgekit.device.preflight import pick_variant
from edgekit.device.probe import DeviceInfo, probe
from edgekit.device.provision import needs_provisioning, provision, shim_version
from edgekit.device.releases import list_releases, scratch_token
from edgekit.device.trust import install_signers
from edgekit.errors import DeviceAnswerRefused, RemoteCommandFailed
from edgekit.models.bundle import MODULE, Bundle
from edgekit.toolchain.iree import driver_for_threads, runtime_config
from edgekit.toolchain.iree_profile import profiling_flags
from edgekit.transport import open_device
from edgekit.transport.base import Transport

# The most a device's HAL profile trace may be (the device is not trusted: every download has
# a cap; a trace of a few thousand dispatches is a few MiB)
TRACE_MAX_BYTES = 256 << 20


@dataclass
class DeviceTrial:
    conn: Transport
    address: str                     # user@host[:port], or local:DIR
    arch: str
    problems: list[str | None] = field(default_factory=list)  # per bundle: None = validated
    # per bundle: the device's outputs, keyed (sample, output index) (`keep_outputs=True`)
    outputs: list[dict[tuple[int, int], np.ndarray]] = field(default_factory=list)
    info: DeviceInfo | None = None   # what probe read (the variant each bundle runs)
    keep_outputs: bool = False
    say: Callable[[str], None] = lambda _: None
    # the releases this trial uploaded (removed at its end), and those the device already had
    added: list[tuple[str, str]] = field(default_factory=list)
    _before: dict[str, set[str]] = field(default_factory=dict)

    def add(self, bundle: Bundle) -> str | None:
        """Upload `bundle` as a release of its app and validate it there (golden outputs);
        its problems, None when it validated (also appended to `problems`)."""
        app, release = bundle.manifest.app, release_id(bundle)
        if app not in self._before:
            self._before[app] = {r for r, _ in list_releases(self.conn, app)}
        self.say(f"validating {app} {release[:8]} on {self.address}")
        if self.info is None:
            self.info = probe(self.conn)
        variant, _ = pick_variant(bundle.manifest, self.info)
        upload_release(self.conn, bundle, app, release, layout.shims_dir(shim_version()),
                       module=variant.file if variant else MODULE)
        if release not in self._before[app] and (app, release) not in self.added:
            self.added.append((app, release))
        kept: dict[tuple[int, int], np.ndarray] = {}
        report = validate_on_device(self.conn, bundle, layout.release_dir(app, release),
                                    self._runtime(bundle), layout.shims_dir(shim_version()),
                                    kept if self.keep_outputs else None)
        self.outputs.append(kept)
        problems = None if report.ok else "; ".join(
            p for o in report.outputs for p in o.problems)
        self.problems.append(problems)
        return problems

    def dataset_score(self, bundle: Bundle) -> float:
        """The bundle's labelled set (`validation.dataset`) run on the device and scored here,
        as the dataset gate scores it (nothing journaled: the release is the trial's)."""
        from edgekit.device.accuracy import dataset_score
        m = bundle.manifest
        return dataset_score(self.conn, bundle, layout.release_dir(m.app, release_id(bundle)),
                             self._runtime(bundle), layout.shims_dir(shim_version()))

    def _runtime(self, bundle: Bundle) -> str:
        return layout.runtime_dir(bundle.manifest.compiler_version, self.arch)

    def run_round(self, bundle: Bundle, threads: int, repetitions: int) -> list[float]:
        """Per-call ms of one iree-benchmark-module process on the device (golden inputs)."""
        m = bundle.manifest
        config = RoundConfig(repetitions=repetitions, threads=threads, warmup=3,
                             conditions=False,
                             driver=driver_for_threads(m.runtime_driver, threads))
        return bench_round(self.conn, self.arch, release_id(bundle), m, config).samples_ms

    def profile(self, bundle: Bundle, iterations: int, into: Path, threads: int = 1
                ) -> tuple[dict, Path]:
        """(iree-benchmark-module's record, the HAL profile trace fetched into `into`) of
        `iterations` calls on the device with `threads` workers (1: local-sync), as
        iree_profile's profiled_run takes them here."""
        m = bundle.manifest
        driver, workers = runtime_config(m.runtime_driver, threads)
        # bench.sh: EDGEKIT_DRIVER replaces the release's driver; a later worker count wins
        workers_flag = () if workers is None else (f"--task_topology_group_count={workers}",)
        scratch = layout.validation_dir(m.app, scratch_token())
        trace = f"{scratch}/run.ireeprof"
        self.conn.mkdirs(scratch)
        try:
            result = self.conn.run(
                ["env", f"EDGEKIT_DRIVER={safe_name(driver, 'driver')}", "sh",
                 f"{layout.shims_dir(shim_version())}/bench.sh",
                 layout.runtime_dir(m.compiler_version, self.arch),
                 layout.release_dir(m.app, release_id(bundle)),
                 f"--benchmark_min_time={iterations}x", *workers_flag, *profiling_flags(trace)],
                check=False, timeout=3600)
            if result.returncode != 0:
                raise RemoteCommandFailed("iree-benchmark-module's HAL profile failed",
                                          where=self.conn.where, argv=["bench.sh"],
                                          returncode=result.returncode,
                                          stderr_tail=result.stderr.decode(
                                              errors="replace")[-2000:])
            local = into / "device.ireeprof"
            self.conn.get(trace, local, max_bytes=TRACE_MAX_BYTES)
            runs = benchmark_json(result.stdout, self.conn.where).get("benchmarks")
            if not isinstance(runs, list) or not runs or not isinstance(runs[0], dict):
                raise DeviceAnswerRefused("the profiled benchmark reported no run",
                                          where=self.conn.where)
            return runs[0], local
        finally:
            self.conn.run(["rm", "-rf", "--", scratch], check=False)


@contextlib.contextmanager
def trial_on_device(host: str, identity: Path | None, bundles: list[Bundle],
                    say: Callable[[str], None] = lambda _: None,
                    keep_outputs: bool = False) -> Iterator[DeviceTrial]:
    """Upload and validate every bundle on `host`; yields the trial (its `problems` say which
    validated; its `outputs` hold what the device computed, with `keep_outputs`); removes the
    releases it added when the block ends."""
    with open_device(host, identity) as conn:
        address = conn.where
        info = probe(conn)
        first = bundles[0].manifest
        if needs_provisioning(info, first.compiler_version):
            say(f"provisioning {address}")
            provision(conn, info, first.compiler_version)
        install_signers(conn)   # verify.sh checks each upload's signature against them
        trial = DeviceTrial(conn, address, info.arch, info=info, keep_outputs=keep_outputs,
                            say=say)
        try:
            for bundle in bundles:
                trial.add(bundle)
            yield trial
        finally:
            for app, release in trial.added:
                conn.run(["rm", "-rf", "--", layout.release_dir(app, release)], check=False)
