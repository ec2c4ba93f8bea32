"""`edgekit bench` on a local device: the bench shim and the real iree-benchmark-module."""

import pytest

from edgekit.device.bench import BenchOptions, RoundConfig, bench_round, run_bench
from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.errors import ConfigError
from tests.local.conftest import APP

pytestmark = pytest.mark.local


def test_bench_measures_the_current_release_per_call(make_device, v1):
    device = make_device()
    deploy_bundle(device, v1)
    [result] = run_bench(BenchOptions(hosts=(f"local:{device.root}",), app=APP, threads=(1,),
                                      repetitions=6, warmup=1, rounds=2))
    assert result.release == release_id(v1) and result.device == device.where
    assert len(result.latency.samples_ms) == 6 and len(result.latency.round_p50_ms) == 2
    assert result.latency.p50_ms > 0 and result.before.cores >= 1


def test_a_round_runs_the_release_on_another_driver_when_asked(make_device, v1):
    device = make_device()
    deploy_bundle(device, v1)
    from edgekit.device.probe import probe
    arch = probe(device).arch
    run = bench_round(device, arch, release_id(v1), v1.manifest,
                      RoundConfig(repetitions=3, warmup=1, conditions=False,
                                  driver="local-sync"))
    assert len(run.samples_ms) == 3 and all(s > 0 for s in run.samples_ms)
    with pytest.raises(ConfigError):
        RoundConfig(repetitions=0)


def test_a_release_tuned_for_two_workers_is_validated_and_benched_with_two(make_device, v1,
                                                                        bundle_copy):
    from tests.local.conftest import set_manifest
    tuned = bundle_copy(v1, lambda d: set_manifest(d, runtime_driver="local-task",
                                                   runtime_threads=2))
    device = make_device()
    deployed = deploy_bundle(device, tuned)
    assert deployed.report.ok
    run_env = (device.root / ".edgekit" / "apps" / APP / "releases" / deployed.release /
               "run.env").read_text()
    assert "THREADS=2\n" in run_env
    assert "RUNTIME_FLAGS='--device=local-task --task_topology_group_count=2'" in run_env
    host = f"local:{device.root}"
    [as_tuned] = run_bench(BenchOptions(hosts=(host,), app=APP, repetitions=2, warmup=0,
                                        rounds=1))
    assert as_tuned.config["threads"] == 2
    assert as_tuned.config["flags"] == "--device=local-task --task_topology_group_count=2"
    [asked] = run_bench(BenchOptions(hosts=(host,), app=APP, threads=(1,), repetitions=2,
                                     warmup=0, rounds=1))     # an explicit count wins
    assert asked.config["flags"] == "--device=local-task --task_topology_group_count=1"
