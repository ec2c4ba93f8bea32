"""Real torch-mlir + IREE on tiny models, built for the host, an aarch64 board and Vulkan."""

import json
import subprocess

import numpy as np
import pytest
import torch

from edgekit import BuildOptions, build, load_bundle, validate_local
from edgekit.errors import BundleError, CannotRunHere, LoweringError
from edgekit.toolchain.iree import tool_path
from tests.integration.helpers import edgekit, tamper_golden_output

LINEAR = 'name: tiny\nmodel:\n  python: "@TINY@:linear_softmax"\n'


def test_a_host_build_validates_locally_and_records_what_it_is(write_recipe, tmp_path):
    result = build(BuildOptions(recipe=write_recipe(LINEAR), target="host", use_cache=False))
    m = result.bundle.manifest
    assert result.bundle.path == tmp_path / "build" / "tiny-host"
    assert m.compiler_version == "3.13.0" and m.target == "host"
    assert "--iree-llvmcpu-target-cpu=host" in m.compile_flags
    assert m.lowering.used == "tosa" and m.inputs[0].shape == (2, 8)
    assert set(m.files) == {"module.vmfb", "golden/input_0.npy", "golden/output_0.npy",
                            *(f"golden/s{k}_{kind}_0.npy" for k in (1, 2)
                              for kind in ("input", "output"))}
    assert m.golden_reference.startswith("PyTorch 2.")
    result.bundle.verify()
    report = validate_local(result.bundle.path)
    assert report.ok and report.outputs[0].max_abs_error < 1e-5


def test_validating_a_bundle_archive_leaves_no_extraction_behind(write_recipe, tmp_path):
    result = build(BuildOptions(recipe=write_recipe(LINEAR), target="host", tar=True))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = edgekit("validate", str(result.tar), "--local", env={"TMPDIR": str(scratch)})
    assert proc.returncode == 0, proc.stderr
    assert list(scratch.iterdir()) == []


def test_a_second_build_is_a_cache_hit_and_no_cache_rebuilds(write_recipe):
    recipe = write_recipe(LINEAR)
    first = build(BuildOptions(recipe=recipe, target="host"))
    second = build(BuildOptions(recipe=recipe, target="host"))
    assert second.cached
    assert "import" not in second.stage_seconds  # nothing was lowered or compiled again
    assert second.bundle.manifest.files == first.bundle.manifest.files
    forced = build(BuildOptions(recipe=recipe, target="host", use_cache=False))
    assert not forced.cached and "lower+compile" in forced.stage_seconds


def test_changing_the_recipe_misses_the_cache(write_recipe):
    build(BuildOptions(recipe=write_recipe(LINEAR), target="host"))
    changed = write_recipe(LINEAR + "compile:\n  flags: [--iree-opt-level=O2]\n")
    result = build(BuildOptions(recipe=changed, target="host"))
    assert not result.cached and result.bundle.manifest.compile_flags[-1] == "--iree-opt-level=O2"


def test_a_tampered_golden_output_fails_validation(write_recipe):
    bundle = build(BuildOptions(recipe=write_recipe(LINEAR), target="host")).bundle
    tamper_golden_output(bundle.path)
    report = validate_local(bundle.path)
    assert not report.ok and report.outputs[0].problems
    proc = edgekit("validate", str(bundle.path), "--local", "--json")
    assert proc.returncode == 8, proc.stderr
    assert json.loads(proc.stdout)["ok"] is False


def test_a_file_changed_behind_the_manifest_is_refused(write_recipe):
    bundle = build(BuildOptions(recipe=write_recipe(LINEAR), target="host")).bundle
    tamper_golden_output(bundle.path, update_manifest=False)
    with pytest.raises(BundleError, match="sha256"):
        validate_local(bundle.path)


def test_an_rpi4_build_is_an_aarch64_module_the_host_cannot_run(write_recipe):
    result = build(BuildOptions(recipe=write_recipe(LINEAR), target="rpi4", tar=True))
    dump = subprocess.run([tool_path("iree-dump-module"), str(result.bundle.module)],
                          capture_output=True, text=True, check=True).stdout
    assert "embedded-elf-arm_64" in dump and 'cpu = "cortex-a72"' in dump
    assert result.bundle.manifest.arch == "aarch64"
    with load_bundle(result.tar) as archived:
        assert archived.manifest.files == result.bundle.manifest.files
    with pytest.raises(CannotRunHere, match="aarch64"):
        validate_local(result.bundle.path)


def test_a_vulkan_build_runs_on_the_hosts_vulkan_device(write_recipe):
    result = build(BuildOptions(recipe=write_recipe(LINEAR), target="vulkan-generic"))
    assert "--iree-hal-target-backends=vulkan-spirv" in result.bundle.manifest.compile_flags
    dump = subprocess.run([tool_path("iree-dump-module"), str(result.bundle.module)],
                          capture_output=True, text=True, check=True).stdout
    assert "vulkan-spirv-fb" in dump
    assert validate_local(result.bundle.path).ok  # Mesa llvmpipe


def test_auto_lowering_falls_back_when_tosa_cannot_take_an_op(write_recipe):
    recipe = write_recipe('name: at\nmodel:\n  python: "@TINY@:atan2_model"\n')
    result = build(BuildOptions(recipe=recipe, target="host"))
    lowering = result.bundle.manifest.lowering
    assert lowering.used == "linalg"
    failed = lowering.attempts[0]
    assert (failed.lowering, failed.stage, failed.ops) == ("tosa", "lower", ("torch.aten.atan2",))
    assert validate_local(result.bundle.path).ok


def test_a_forced_lowering_that_fails_names_the_op_stage_and_reproducer(write_recipe, tmp_path):
    recipe = write_recipe('name: at\nlowering: tosa\nmodel:\n  python: "@TINY@:atan2_model"\n')
    with pytest.raises(LoweringError) as err:
        build(BuildOptions(recipe=recipe, target="host"))
    assert err.value.ops == ("torch.aten.atan2",)
    assert "linalg" in err.value.hint
    repro = tmp_path / "build" / "at-host.repro" / "tosa"
    assert err.value.reproducer == str(repro.parent)
    assert "torch.aten.atan2" in (repro / "input.mlir").read_text()
    assert (repro / "input.mlirbc").stat().st_size > 0
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host")
    assert proc.returncode == 4
    assert "torch.aten.atan2" in proc.stderr and "reproducer:" in proc.stderr


def test_in_place_ops_and_buffers_are_functionalized(write_recipe):
    recipe = write_recipe('name: ip\nmodel:\n  python: "@TINY@:inplace_with_buffer"\n')
    result = build(BuildOptions(recipe=recipe, target="host"))
    assert len(result.bundle.manifest.outputs) == 2
    assert validate_local(result.bundle.path).ok


def test_declared_inputs_with_a_dynamic_batch_and_seeded_samples(write_recipe):
    recipe = write_recipe("""
        name: dyn
        model:
          python: "@TINY@:mlp"
        inputs:
          - name: features
            shape: [batch, 16]
        dynamic_dims:
          batch: {min: 1, max: 8, example: 3}
        seed: 7
    """)
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    assert bundle.manifest.inputs[0].shape == ("batch", 16)
    assert np.load(bundle.file("golden/input_0.npy")).shape == (3, 16)
    assert validate_local(bundle.path).ok


def test_an_exported_program_file_is_a_model_source(write_recipe, tmp_path):
    from tests.fixtures.tiny_models import linear_softmax
    model, example = linear_softmax()
    torch.export.save(torch.export.export(model, example), tmp_path / "tiny.pt2")
    np.savez(tmp_path / "samples.npz", x=example[0].numpy())
    recipe = write_recipe("name: pt2\nmodel:\n  exported: tiny.pt2\n  trust_pickle: true\n"
                          "samples: samples.npz\n")
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    assert bundle.manifest.inputs[0].name == "x"
    assert validate_local(bundle.path).ok


def test_the_cli_builds_and_validates_with_json(write_recipe, tmp_path):
    recipe = write_recipe(LINEAR)
    built = edgekit("build", "--recipe", str(recipe), "--target", "host", "--json")
    assert built.returncode == 0, built.stderr
    bundle = json.loads(built.stdout)["bundle"]
    again = edgekit("build", "--recipe", str(recipe), "--target", "host")
    assert again.returncode == 0 and "cached" in again.stdout
    checked = edgekit("validate", bundle, "--local")
    assert checked.returncode == 0 and "PASS" in checked.stdout


def test_a_misspelled_recipe_key_exits_2_with_file_and_line(write_recipe):
    recipe = write_recipe(LINEAR + "lowerng: tosa\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host")
    assert proc.returncode == 2
    assert f"{recipe}:4: lowerng: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_weights_imported_from_raw_bytes_give_the_same_module_as_torch_mlirs_default():
    import io

    from torch_mlir import fx

    from edgekit.toolchain import torch_mlir as tm
    from tests.fixtures.tiny_models import inplace_with_buffer
    model, example = inplace_with_buffer()
    program = torch.export.export(model, example)
    default = fx.export_and_import(program, output_type="torch", func_name="main",
                                   decomposition_table=tm._decompositions())
    buffer = io.BytesIO()
    default.operation.write_bytecode(buffer)
    # equal but for locations (edgekit names each op's after its module path)
    assert _full_text(tm.import_program(program)) == _full_text(buffer.getvalue())


def _full_text(bytecode: bytes) -> str:
    """The module with every weight's bytes and no locations."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d
    with ir.Context() as context:
        torch_d.register_dialect(context)
        module = ir.Module.parse(bytecode)
        return module.operation.get_asm(print_generic_op_form=True, large_elements_limit=None,
                                        enable_debug_info=False)
