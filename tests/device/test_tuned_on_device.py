"""A tuned choice reaches the device as measured: `edgekit tune --host --dispatches` searches
tile sizes for an aarch64 target on the emulated Pi, and the bundle built afterwards carries
its dispatch set, is validated on the device with the tuned runtime configuration and
benchmarked in it. (Timings under qemu mean nothing: the flow is checked, not who wins.)"""

import json

from tests.integration.helpers import edgekit

MODEL = '"@TINY@:linear_softmax"'    # two dispatches: a 2x4x8 matmul and a softmax


def test_tune_dispatches_on_the_pi_and_the_bundle_runs_there_as_tuned(write_recipe, arm_device):
    recipe = write_recipe(f"name: pi-dispatch\nmodel:\n  python: {MODEL}\n")
    proc = edgekit("tune", "--recipe", str(recipe), "--target", "rpi4", "--host",
                   arm_device.name, "--lowerings", "linalg", "--flag-sets", "default",
                   "--threads", "1", "--rounds", "1", "--repetitions", "2", "--dispatches", "1",
                   "--per-dispatch", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["measured_on"] == arm_device.name and record["measured_in"] == "tools"
    tried = [c for c in record["candidates"] if "+main_dispatch_" in c["flag_set"]]
    # the dispatch picked by the HAL profile taken on the device, its candidates built,
    # validated and timed there (every one: no screening by profile on a device)
    assert len(tried) == 2 and all(c["status"] == "ok" and c["p50_ms"] for c in tried), \
        (record["candidates"], proc.stderr[-3000:])
    assert all("HAL profile on the device" in c["reason"] for c in tried), tried
    chosen = record["chosen"]
    assert chosen["threads"] == 1

    # the same model with a searched set named in its recipe (all of the candidate's flags,
    # after the tuned variant's: they win, whichever won under qemu) deploys with the set in
    # the release, validated and benchmarked there in the tuned runtime configuration
    pinned = write_recipe(f"name: pi-pinned\nmodel:\n  python: {MODEL}\ncompile:\n  flags: "
                          f"{json.dumps(tried[0]['flags'])}\n", name="pinned.yaml")
    bundle = pinned.parent / "pinned-bundle"
    built = edgekit("build", "--recipe", str(pinned), "--target", "rpi4", "--out", str(bundle))
    assert built.returncode == 0, built.stderr
    # bench --bundle deploys it first: validated on the device, or no benchmark
    bench = edgekit("bench", "run", arm_device.name, "--bundle", str(bundle), "--rounds", "1",
                    "--repetitions", "2", "--warmup", "0", "--json")
    assert bench.returncode == 0, bench.stderr
    [entry] = json.loads(bench.stdout)["results"]
    assert entry["config"]["driver"] == "local-sync" and entry["config"]["threads"] == 1
    assert entry["config"]["flags"] == "--device=local-sync"
    release = arm_device.host_path(f"{arm_device.home}/.edgekit/apps/pi-pinned/releases/"
                                   f"{entry['release']}")
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["tuning"]["flags"] == chosen["flags"]          # the tuned choice applies
    digest = tried[0]["flags"][-1].rpartition("=")[2]
    assert manifest["dispatch_configs"] == digest
    assert list((release / "dispatch-configs").glob("main_dispatch_*.mlir"))
    assert (manifest["runtime_driver"], manifest["runtime_threads"]) == ("local-sync", None)
    run_env = (release / "run.env").read_text()
    assert "DRIVER=local-sync" in run_env and "RUNTIME_FLAGS='--device=local-sync'" in run_env
