"""Per-dispatch tile sizes with the real compiler: a configuration made from IREE's own
choice for a tiny model's matmul changes that dispatch's generated code (x86_64 here, and
cross-compiled for cortex-a72), the module still validates, and `edgekit tune --dispatches`
measures such candidates and builds use its choice."""

import json
import subprocess
from pathlib import Path

from edgekit.pipeline.build import BuildOptions, Variant, build
from edgekit.toolchain import iree
from edgekit.toolchain.iree_profile import profiled_run
from edgekit.tune.dispatch_search import (candidates_for, configured_dispatches, rule_set,
                                          weights_once_set)
from edgekit.tune.tuner import TuneOptions
from edgekit.validate.local import validate_local
from tests.integration.helpers import edgekit

MATMUL = 'name: {name}\nmodel:\n  python: "@TINY@:matmul_stack"\n'
BASE = Variant("linalg", "default", ())


def codegen(recipe: Path, target: str, variant: Variant, out: Path):
    """The bundle, and the LLVM IR IREE generated for its executables."""
    dump = out / "intermediates"
    flags = (*variant.flags, f"--iree-hal-dump-executable-intermediates-to={dump}")
    bundle = build(BuildOptions(recipe=recipe, target=target, use_tuned=False, out=out / "b",
                                variant=Variant(variant.lowering, variant.flag_set,
                                                flags))).bundle
    return bundle, "".join(p.read_text() for p in sorted(dump.glob("*.codegen.ll")))


def one_matmul_candidate(recipe: Path, target: str, work: Path) -> Variant:
    options = TuneOptions(recipe=recipe, target=target)
    _, configured = configured_dispatches(options, BASE, work)
    matmuls = [d for d in configured if "matmul" in d.function]
    assert matmuls, [d.function for d in configured]
    assert dict(matmuls[0].levels)["distribution"]          # what the compiler chose
    [candidate] = candidates_for(matmuls[:1], BASE, per_dispatch=1)
    variant = candidate.variant
    assert variant.flags[-1].startswith("--edgekit-dispatch-configs=")
    return variant


def test_a_tuned_tile_size_changes_the_matmuls_code_and_the_module_still_validates(
        write_recipe, tmp_path):
    recipe = write_recipe(MATMUL.format(name="dispatch-mm"))
    variant = one_matmul_candidate(recipe, "host", tmp_path / "dump")
    _, before = codegen(recipe, "host", BASE, tmp_path / "a")
    _, again = codegen(recipe, "host", BASE, tmp_path / "c")
    tuned, after = codegen(recipe, "host", variant, tmp_path / "b")
    assert before == again              # the compiler is deterministic: the change is the tiles
    assert after and after != before
    report = validate_local(tuned.path)
    assert report.ok, report


def test_weights_once_puts_all_rows_of_a_data_tiled_matmul_in_each_workgroup(
        write_recipe, tmp_path):
    recipe = write_recipe('name: dispatch-wide\nmodel:\n  python: "@TINY@:few_rows_wide_weights"\n')
    tiled = Variant("linalg", "data-tiling", ("--iree-opt-data-tiling",))
    options = TuneOptions(recipe=recipe, target="host")
    _, configured = configured_dispatches(options, tiled, tmp_path / "dump")
    [mm] = [d for d in configured if d.root_name.endswith("mmt4d")]
    # IREE's own choice: one 16-row tile (of three) per workgroup; the operands' shapes are read
    assert mm.operand_shapes[0][0] == 3 and dict(mm.levels)["distribution"][0] == 1
    rule = weights_once_set(configured, tiled, tmp_path)
    assert list(rule.files) == [mm.executable]
    assert list(rule.functions.values()) == [mm.function]
    variant = rule.variant
    _, before = codegen(recipe, "host", tiled, tmp_path / "a")
    tuned, after = codegen(recipe, "host", variant, tmp_path / "b")
    assert after and after != before
    report = validate_local(tuned.path)
    assert report.ok, report


def test_wide_accumulators_widen_the_kws_mlps_matrix_vector_products(tmp_path):
    # the packaged KWS MLP, batch 1: TOSA gives its layers as 1-row batch_matmuls
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "kws_mlp.yaml"
    base = Variant("tosa", "default", ())
    _, configured = configured_dispatches(TuneOptions(recipe=recipe, target="host"), base,
                                          tmp_path / "dump")
    rule = rule_set("wide-accumulators", configured, base, tmp_path)
    # the 490- and 256-deep layers (256 columns); the 12-column head has no room to widen
    assert sorted(f.split("_batch_matmul_")[1] for f in rule.functions.values()) == \
        ["1x1x256x256_f32", "1x1x256x490_f32"]
    assert all("vector_common_parallel = [1, 1, 128, 0]" in t for t in rule.files.values())
    _changes_the_code_and_validates(recipe, base, rule, tmp_path)


def _changes_the_code_and_validates(recipe, base, rule, tmp_path):
    """The rule's variant compiles to other code than the base, and validates."""
    _, before = codegen(recipe, "host", base, tmp_path / "a")
    tuned, after = codegen(recipe, "host", rule.variant, tmp_path / "b")
    assert after and after != before
    report = validate_local(tuned.path)
    assert report.ok, report


def test_two_vector_tiles_widen_an_inverted_residuals_expansion_and_it_validates(
        write_recipe, tmp_path):
    recipe = write_recipe('name: dispatch-2v\nmodel:\n  python: "@TINY@:inverted_residual"\n')
    base = Variant("tosa", "pointwise-as-matmul", ("--edgekit-pointwise-as-matmul=on",))
    _, configured = configured_dispatches(TuneOptions(recipe=recipe, target="host"), base,
                                          tmp_path / "dump")
    rule = rule_set("two-vector-tiles", configured, base, tmp_path)
    # the 16 -> 64 expansion (14x14 pixels, 64 columns); the 64 -> 16 projection has one
    # vector of columns, and the depthwise convolution is no matmul
    assert [f.split("_dispatch_")[1].split("_", 1)[1] for f in rule.functions.values()] == \
        ["matmul_like_14x14x64x16_f32"], rule.functions
    assert all(", 32, 0]" in t for t in rule.files.values())
    _changes_the_code_and_validates(recipe, base, rule, tmp_path)


def test_the_hal_profile_runs_with_the_thread_count_being_tuned(write_recipe, tmp_path):
    # a 2-thread budget's search ranks and screens dispatches as two workers run them: the
    # workers' time in a dispatch's tiles then exceeds its wall time (two at once), which one
    # thread's inline run (local-sync) never shows
    recipe = write_recipe('name: dispatch-2t\nmodel:\n  python: "@TINY@:few_rows_wide_weights"\n')
    bundle = build(BuildOptions(recipe=recipe, target="host", use_tuned=False,
                                out=tmp_path / "b", variant=BASE)).bundle

    def most_parallel(threads: int) -> float:
        # per call, not the run's aggregate: on a loaded 2-vCPU VM the second worker wakes too
        # late for many calls (a CI run's aggregate read 1.16), but not for all of 3 x 20
        def per_call(trace: Path) -> list[float]:
            rows = subprocess.run([iree.tool_path("iree-profile"), "dispatch", "--dispatch_events",
                                   "--format=jsonl", str(trace)], check=True,
                                  capture_output=True, text=True).stdout.splitlines()
            return [e["tile_duration_sum_ns"] / e["duration_ns"] for e in map(json.loads, rows)
                    if e.get("type") == "host_dispatch_event"]
        ratios = []
        for _ in range(3):
            profiled_run(bundle, 20, tmp_path, threads)
            ratios += per_call(tmp_path / "run.ireeprof")
        return max(ratios)

    assert most_parallel(1) <= 1.0
    assert most_parallel(2) > 1.2


def test_the_same_search_compiles_for_cortex_a72(write_recipe, tmp_path):
    recipe = write_recipe(MATMUL.format(name="dispatch-mm-a72"))
    variant = one_matmul_candidate(recipe, "rpi4", tmp_path / "dump")
    _, before = codegen(recipe, "rpi4", BASE, tmp_path / "a")
    _, after = codegen(recipe, "rpi4", variant, tmp_path / "b")
    assert "aarch64" in after and after != before


def test_tune_measures_dispatch_candidates_and_builds_use_its_choice(write_recipe):
    recipe = write_recipe(MATMUL.format(name="dispatch-tuned"))
    proc = edgekit("tune", "--recipe", str(recipe), "--target", "host", "--lowerings", "linalg",
                   "--flag-sets", "default", "--threads", "1", "--rounds", "3",
                   "--repetitions", "9", "--dispatches", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    tried = [c for c in record["candidates"] if "+main_dispatch_" in c["flag_set"]]
    # screened by their dispatch's time in the HAL profile, the winners measured as a whole
    assert tried and all(c["status"] in ("ok", "screened-out") for c in tried), tried
    assert all("HAL profile" in c["reason"] for c in tried), tried
    assert all(c["flags"][-1].startswith("--edgekit-dispatch-configs=") for c in tried)
    built = edgekit("build", "--recipe", str(recipe), "--target", "host", "--json")
    assert built.returncode == 0, built.stderr
    manifest = json.loads(built.stdout)["manifest"]
    assert manifest["tuning"]["flags"] == record["chosen"]["flags"]
    tuned_configs = [f for f in record["chosen"]["flags"] if "dispatch-configs" in f]
    substituted = [f for f in manifest["compile_flags"]
                   if f.startswith("--iree-hal-substitute-executable-configurations-from=")]
    assert len(substituted) == len(tuned_configs)     # applied when chosen, else not at all
    if tuned_configs:
        assert substituted[0].endswith(tuned_configs[0].rpartition("=")[2])


def test_a_configuration_set_missing_from_this_machine_is_one_line_naming_tune(write_recipe):
    recipe = write_recipe(MATMUL.format(name="dispatch-missing") +
                          f"compile:\n  flags: [--edgekit-dispatch-configs={'0' * 64}]\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host")
    assert proc.returncode == 2, proc.stderr
    assert "edgekit tune" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bundle_carries_its_dispatch_set_and_rebuilds_restore_it(write_recipe, tmp_path):
    """The set a module was compiled with travels in the bundle (listed and signed like any
    payload file), and a home without it gets it back from the bundle: a build whose output
    directory holds that bundle, and `bisect --bundle`'s recovery."""
    import shutil

    from edgekit.bisect.from_bundle import recover
    from edgekit.toolchain import dispatch_sets

    recipe = write_recipe(MATMUL.format(name="dispatch-carried"))
    variant = one_matmul_candidate(recipe, "host", tmp_path / "dump")
    digest = variant.flags[-1].rpartition("=")[2]
    out = tmp_path / "bundle"
    bundle = build(BuildOptions(recipe=recipe, target="host", variant=variant, out=out)).bundle
    m = bundle.manifest
    assert m.dispatch_configs == digest
    carried = [f for f in m.files if f.startswith("dispatch-configs/")]
    assert carried and all(f.endswith(".mlir") for f in carried)
    bundle.verify()
    home_set = dispatch_sets.root() / digest
    assert bundle.dispatch_config_set() == dispatch_sets.read_set(home_set)

    # another machine: the tuned set is not in its home (without a bundle to restore it
    # from: one line, test_a_configuration_set_missing_…)
    shutil.rmtree(home_set)
    build(BuildOptions(recipe=recipe, target="host", variant=variant, use_cache=False, out=out))
    assert dispatch_sets.set_digest(dispatch_sets.read_set(home_set)) == digest

    shutil.rmtree(home_set)
    recovered = recover(bundle, tmp_path)
    assert f"--edgekit-dispatch-configs={digest}" in recovered.recipe.read_text()
    assert dispatch_sets.read_set(home_set) == bundle.dispatch_config_set()


def test_a_second_look_measures_again_only_the_candidates_it_names(write_recipe, tmp_path):
    from edgekit.config.profiles import load_target
    from edgekit.tune.tuner import measuring_again
    recipe = write_recipe(MATMUL.format(name="second-look"))
    variants = [BASE, Variant("linalg", "data-tiling", ("--iree-opt-data-tiling",))]
    built = [(v, build(BuildOptions(recipe=recipe, target="host", variant=v, use_tuned=False,
                                    out=tmp_path / v.flag_set)).bundle) for v in variants]
    said = []
    again = measuring_again(TuneOptions(recipe=recipe, target="host", rounds=3, repetitions=9),
                            load_target("host"), built, (1,), said.append)
    [result] = again(["linalg/data-tiling"])
    assert result.variant == "linalg/data-tiling" and result.status == "ok", result
    assert len(result.round_p50_ms) == 3 and result.threads == 1
    assert not any("linalg/default" in line for line in said), said


def test_a_near_miss_of_the_search_is_measured_again_while_its_builds_exist(write_recipe,
                                                                           monkeypatch):
    """The second look runs inside the step, on the same builds: forced here (every candidate
    a near miss, none clearly faster), it must come back with times, not a failed run."""
    from edgekit.config.profiles import load_target
    from edgekit.tune import tuner
    from edgekit.tune.dispatch_search import search_dispatches
    recipe = write_recipe('name: second-look-search\nmodel:\n  python: '
                          '"@TINY@:few_rows_wide_weights"\n')
    monkeypatch.setattr(tuner, "near_miss", lambda a, b: True)
    monkeypatch.setattr(tuner, "clearly_faster", lambda a, b, min_gain=0.03: False)
    chosen = tuner.CandidateResult(lowering="linalg", flag_set="data-tiling",
                                   flags=("--iree-opt-data-tiling",), threads=1, status="ok",
                                   p50_ms=1.0, round_p50_ms=(1.0, 1.0, 1.0))
    options = TuneOptions(recipe=recipe, target="host", rounds=3, repetitions=9, dispatches=1,
                          per_dispatch=1)
    said = []
    kept, _ = search_dispatches(options, load_target("host"), chosen, said.append)
    verdicts = [s for s in said if s.startswith(("a second look", "kept", "not kept"))]
    assert verdicts[0].startswith("a second look for"), said
    assert verdicts[-1].startswith("not kept") and "in the same 6 rounds" in verdicts[-1], said
    assert kept is chosen
