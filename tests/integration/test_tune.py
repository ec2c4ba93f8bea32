"""`edgekit tune` on a tiny model with the real compiler and runtime: candidates are built,
validated and benchmarked; the fastest valid one is recorded and builds use it."""

import json
import os
from pathlib import Path

import numpy as np

from tests.integration.helpers import edgekit

MATMUL = 'name: {name}\nmodel:\n  python: "@TINY@:matmul_stack"\n'


def tune_json(*args):
    proc = edgekit("tune", *args, "--rounds", "3", "--repetitions", "9", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_tune_picks_the_fastest_valid_variant_and_builds_use_it(write_recipe, tmp_path):
    recipe = write_recipe(MATMUL.format(name="tuned-mm"))
    # a user profile with a flag set that does not compile
    (tmp_path / "host-tune.yaml").write_text(
        "extends: host\ntune:\n  threads: [1]\n  flag_sets:\n"
        "    data-tiling: [--iree-opt-data-tiling]\n"
        "    broken: [--iree-no-such-flag]\n"
        # no convolution to rewrite: the same module as data-tiling's
        "    rewrite: [--edgekit-convs-as-matmul=64, --iree-opt-data-tiling]\n")
    profile = str(tmp_path / "host-tune.yaml")
    sets = ("--lowerings", "tosa,linalg", "--flag-sets", "default,data-tiling,broken,rewrite")
    record = tune_json("--recipe", str(recipe), "--target", profile, *sets)
    by_variant = {c["lowering"] + "/" + c["flag_set"]: c for c in record["candidates"]}
    assert set(by_variant) == {f"{lw}/{s}" for lw in ("tosa", "linalg")
                               for s in ("default", "data-tiling", "broken", "rewrite")}
    assert by_variant["tosa/broken"]["status"] == "build-failed"
    assert "no-such-flag" in by_variant["tosa/broken"]["reason"]
    # an identical module is measured once and reported as such
    copy, original = by_variant["tosa/rewrite"], by_variant["tosa/data-tiling"]
    assert copy["status"] == "ok" and copy["reason"] == "same module as tosa/data-tiling"
    assert copy["round_p50_ms"] == original["round_p50_ms"]
    valid = [c for c in record["candidates"] if c["status"] == "ok"]
    assert len(valid) == 6
    assert record["chosen"]["flag_set"] != "rewrite"  # a tie goes to the variant measured
    chosen = record["chosen"]
    fastest = min(valid, key=lambda c: c["p50_ms"])
    # the fastest, unless it does not beat the untuned build beyond the measured noise
    assert chosen == fastest or (
        f"{chosen['lowering']}/{chosen['flag_set']}" == record["default_variant"]
        and chosen["threads"] == fastest["threads"])
    assert record["default_variant"] == "tosa/default" and record["measured_on"] == "host"
    # timed where a host bundle runs: in this process, through the lean call path
    assert record["measured_in"] == "in-process"
    # the fastest against the untuned build, with the noise it had to beat (issue 20)
    assert record["gain_pct"] is not None and record["noise_pct"] >= 0
    # a winner stays only when its win repeats in fresh rounds against the untuned build
    # (issue 37): the record says which, and a win not repeated leaves the untuned build chosen
    untuned = by_variant["tosa/default"]
    if chosen == untuned:
        assert record["confirmation"] == "" or \
            record["confirmation"].startswith("win not repeated: ")
    else:
        assert record["confirmation"].startswith(
            f"win repeated: {chosen['lowering']}/{chosen['flag_set']} (1t) against the "
            "untuned tosa/default (1t)")
        assert "3 fresh rounds" in record["confirmation"]

    built = edgekit("build", "--recipe", str(recipe), "--target", profile, "--json")
    assert built.returncode == 0, built.stderr
    manifest = json.loads(built.stdout)["manifest"]
    assert manifest["tuning"]["variant"] == f"{chosen['lowering']}/{chosen['flag_set']}"
    assert manifest["tuning"]["measured_in"] == "in-process"
    assert manifest["lowering"]["used"] == chosen["lowering"]
    assert all(flag in manifest["compile_flags"] for flag in chosen["flags"])
    # measured with one thread, so it runs as measured: inline, without a task system
    assert manifest["runtime_driver"] == "local-sync"
    human = edgekit("build", "--recipe", str(recipe), "--target", profile)
    assert "tuned variant" in human.stdout
    untuned = edgekit("build", "--recipe", str(recipe), "--target", profile, "--no-tuned",
                      "--json")
    assert json.loads(untuned.stdout)["manifest"]["tuning"] is None
    assert json.loads(untuned.stdout)["manifest"]["runtime_driver"] == "local-task"

    # re-tuning only re-measures: every candidate build is a cache hit
    cache_dir = Path(os.environ["EDGEKIT_CACHE_DIR"])
    cache = sorted(p.name for p in cache_dir.glob("**/*"))
    again = tune_json("--recipe", str(recipe), "--target", profile, *sets)
    assert len(again["candidates"]) == len(record["candidates"])
    assert sorted(p.name for p in cache_dir.glob("**/*")) == cache


def test_tune_times_a_thread_budget_in_process_and_records_the_runtime(write_recipe):
    """Thread counts are a budget: 1 and 2 threads are both timed in this process (local-sync,
    local-task with two workers); the untuned build at 2 threads is the reference, and the
    choice — whichever it is on a noisy machine — runs as it was timed."""
    from edgekit import BuildOptions, build
    from edgekit.compile.runners import CallStats, InProcessRunner
    recipe = write_recipe(MATMUL.format(name="tuned-threads"))
    args = ("--recipe", str(recipe), "--target", "host", "--lowerings", "tosa",
            "--flag-sets", "default,data-tiling", "--threads", "1,2")
    record = tune_json(*args)
    assert record["measured_in"] == "in-process"
    measured = {(c["flag_set"], c["threads"]) for c in record["candidates"]
                if c["status"] == "ok" and len(c["round_p50_ms"]) == 3}
    assert {("default", 1), ("default", 2)} <= measured
    assert record["default_variant"] == "tosa/default"
    chosen = record["chosen"]
    untuned_2t = next(c for c in record["candidates"]
                      if c["flag_set"] == "default" and c["threads"] == 2)
    assert chosen == untuned_2t or chosen["p50_ms"] < untuned_2t["p50_ms"]

    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    m = bundle.manifest
    assert m.tuning.threads == chosen["threads"] and m.tuning.measured_in == "in-process"
    assert m.runtime_driver == ("local-sync" if chosen["threads"] == 1 else "local-task")
    # the in-process runner runs the tuned thread count, and computes the golden outputs
    runner = InProcessRunner(bundle, CallStats(0, "test"))
    runner.declared = tuple(o.dtype for o in m.outputs)
    inputs = [np.load(bundle.file(p)) for p in m.golden_inputs]
    (out,) = runner.run(inputs)
    np.testing.assert_allclose(out, np.load(bundle.file(m.golden_outputs[0])), rtol=1e-4,
                               atol=1e-5)
    assert f"{chosen['threads']} thread(s)" in runner.description
    runner.release()

    # the tools, when asked for: iree-benchmark-module here
    tools = tune_json(*args, "--runtime", "tools")
    assert tools["measured_in"] == "tools"
    refused = edgekit("tune", *args, "--runtime", "in-process", "--host", "local:/nonexistent")
    assert refused.returncode == 2 and "--runtime tools" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_tune_refuses_unknown_flag_sets_with_the_choices(write_recipe):
    recipe = write_recipe(MATMUL.format(name="tuned-bad"))
    proc = edgekit("tune", "--recipe", str(recipe), "--target", "host", "--flag-sets", "fast")
    assert proc.returncode == 2
    assert "fast" in proc.stderr and "im2col+data-tiling" in proc.stderr


def test_a_graph_rewrite_in_the_flags_builds_validates_and_is_recorded(write_recipe):
    from edgekit import BuildOptions, build, validate_local
    recipe = write_recipe('name: pyramid\nmodel:\n  python: "@TINY@:conv_pyramid"\n'
                          "compile: {flags: [--edgekit-convs-as-matmul=64, "
                          "--iree-opt-data-tiling]}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    manifest = bundle.manifest
    assert "2 of 4 convolutions as im2col + matmul" in manifest.lowering.note
    assert "--iree-opt-data-tiling" in manifest.compile_flags
    assert not any(f.startswith("--edgekit-") for f in manifest.compile_flags)
    assert validate_local(bundle.path).ok  # against the model as written
    bad = write_recipe('name: pyramid\nmodel:\n  python: "@TINY@:conv_pyramid"\n'
                       "compile: {flags: [--edgekit-convs-as-matmul=lots]}\n", "bad.yaml")
    proc = edgekit("build", "--recipe", str(bad), "--target", "host")
    assert proc.returncode == 2 and "--edgekit-convs-as-matmul=…" in proc.stderr
    assert "bad.yaml:4" in proc.stderr  # refused when the recipe is read
    assert "Traceback" not in proc.stderr
