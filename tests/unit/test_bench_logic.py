import pytest

from edgekit.device.bench import (latency_stats, parse_conditions, per_call_ms,
                                  unreliable_reasons)
from edgekit.models.bench import Conditions
from tests.fixtures.bench_results import CALM, result


def test_per_call_times_come_from_iteration_rows_in_ms():
    report = {"benchmarks": [
        {"run_type": "iteration", "real_time": 1500.0, "time_unit": "us"},
        {"run_type": "iteration", "real_time": 2.0, "time_unit": "ms"},
        {"run_type": "aggregate", "real_time": 9.0, "time_unit": "ms"}]}
    assert per_call_ms(report) == [1.5, 2.0]

def test_latency_statistics_are_ordered_and_consistent():
    stats = latency_stats([float(x) for x in range(1, 101)])
    assert stats.min_ms == 1 and stats.max_ms == 100
    assert stats.min_ms <= stats.p50_ms <= stats.p90_ms <= stats.p99_ms <= stats.max_ms
    assert stats.throughput_per_s == pytest.approx(1000 / 50.5)

def test_conditions_are_parsed_from_the_shims_output():
    c = parse_conditions("cores=4\nloadavg=0.10 0.20 0.30\ncpu_busy_pct=12\n"
                         "freq_khz.cpu0=1500000\ngovernor.cpu0=ondemand\n"
                         "temp_mc.cpu-thermal=61234\nthrottled=0x50005\n")
    assert c.loadavg == (0.1, 0.2, 0.3) and c.cpu_busy_pct == 12
    assert c.freq_khz == {"cpu0": 1500000} and c.governor == {"cpu0": "ondemand"}
    assert c.temp_c == {"cpu-thermal": pytest.approx(61.234)} and c.throttled == "0x50005"

def test_throttling_heat_load_and_noise_make_a_run_unreliable_with_reasons():
    steady = latency_stats([10.0, 10.1, 9.9, 10.0])
    assert unreliable_reasons(CALM, CALM, steady) == []
    throttled = Conditions(cores=4, throttled="0x50005")
    hot = Conditions(cores=4, temp_c={"cpu": 85.0})
    busy = Conditions(cores=4, cpu_busy_pct=90.0)
    assert "throttled" in unreliable_reasons(throttled, CALM, steady)[0]
    assert "hot" in unreliable_reasons(CALM, hot, steady)[0]
    assert "heavy load" in unreliable_reasons(busy, CALM, steady)[0]
    noisy = latency_stats([1.0, 10.0, 1.0, 10.0])
    assert "noisy" in unreliable_reasons(CALM, CALM, noisy)[0]
    unstable = latency_stats([5.0] * 6, [4.0, 6.0, 5.0])
    assert "unstable" in unreliable_reasons(CALM, CALM, unstable)[0]
    tails_only = latency_stats([1.0, 10.0, 1.0, 10.0], [5.0, 5.1])
    assert unreliable_reasons(CALM, CALM, tails_only) == []
    slower = Conditions(cores=4, freq_khz={"cpu0": 600000})
    faster = Conditions(cores=4, freq_khz={"cpu0": 1500000})
    assert "frequency dropped" in unreliable_reasons(faster, slower, steady)[0]

def _manifest(driver: str, threads: int | None = None, profile_driver: str = "local-task"):
    from edgekit.models.bundle import Manifest
    return Manifest.model_construct(runtime_driver=driver, runtime_threads=threads,
                                    target_profile={"runtime": {"driver": profile_driver}})

def test_thread_counts_apply_to_the_task_driver_only():
    from edgekit.device.bench import run_configs
    from edgekit.toolchain.iree import driver_for_threads
    assert run_configs(_manifest("local-task"), (1, 2, 2, 4)) == (
        (1, "local-task"), (2, "local-task"), (4, "local-task"))
    # local-sync from its profile runs on the caller's thread; Vulkan on the GPU
    assert run_configs(_manifest("local-sync", profile_driver="local-sync"), (1, 2)) == (
        (1, "local-sync"),)
    assert run_configs(_manifest("vulkan", profile_driver="vulkan"), (1, 2)) == ((1, "vulkan"),)
    assert driver_for_threads("local-task", 1) == "local-sync"
    assert driver_for_threads("local-task", 2) == "local-task"
    assert driver_for_threads("vulkan", 1) == "vulkan"

def test_bench_runs_a_bundle_as_tuned_unless_threads_are_given():
    from edgekit.device.bench import run_configs
    from edgekit.toolchain.iree import runtime_config, runtime_flags
    # tuned for 1 thread: local-sync; for 2: local-task with 2 workers (pipeline/hit.py)
    assert runtime_config("local-task", 1) == ("local-sync", None)
    assert runtime_config("local-task", 2) == ("local-task", 2)
    assert runtime_config("vulkan", 1) == ("vulkan", None)
    assert runtime_config("local-task", None) == ("local-task", None)
    assert runtime_flags("local-task", 2) == ("--device=local-task",
                                              "--task_topology_group_count=2")
    assert run_configs(_manifest("local-sync"), None) == ((1, "local-sync"),)
    assert run_configs(_manifest("local-task", 2), None) == ((2, "local-task"),)
    assert run_configs(_manifest("local-task"), None) == ((1, "local-task"),)   # untuned
    # an explicit count wins: other counts on the profile's driver, the tuned one as tuned
    assert run_configs(_manifest("local-sync"), (1, 2)) == ((1, "local-sync"),
                                                           (2, "local-task"))
    assert run_configs(_manifest("local-task", 2), (1, 2)) == ((1, "local-task"),
                                                              (2, "local-task"))

def test_a_release_tuned_onto_local_sync_compares_with_the_previous_cpu_release():
    from edgekit.device.history import previous_release_result
    before = result([10.0] * 20, release="r1", id="a")            # local-task, 1 thread
    tuned = result([7.0] * 20, release="r2", id="b").model_copy(
        update={"config": {"threads": 1, "driver": "local-sync"},
                "created_at": "2026-01-02T00:00:00"})
    assert previous_release_result(tuned, [before, tuned]) == before
    gpu = tuned.model_copy(update={"config": {"threads": 1, "driver": "vulkan"}})
    assert previous_release_result(gpu, [before, gpu]) is None
