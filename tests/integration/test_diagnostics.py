"""What a user reads when a model cannot be exported, imported or lowered: one line with the
op, where it is in the model, the stage and the compiler's own reason."""

import json

import pytest
import torch

from edgekit import BuildOptions, build, validate_local
from edgekit.errors import LoweringError, ModelLoadError
from tests.conftest import TINY
from tests.fixtures.cli import edgekit_here
from tests.fixtures.tosa_legalisation import __file__ as LEGALISATION


def test_non_persistent_buffers_and_tensor_constants_import_and_validate(write_recipe):
    program = torch.export.export(*_tiny("lifted_constants"))
    assert set(program.constants) == {"positions", "scale"}  # not in the state dict
    recipe = write_recipe('name: lifted\nmodel:\n  python: "@TINY@:lifted_constants"\n')
    result = build(BuildOptions(recipe=recipe, target="host"))
    assert validate_local(result.bundle.path).ok


def test_a_data_dependent_branch_is_one_line_naming_the_users_source_line(write_recipe):
    recipe = write_recipe('name: dd\nmodel:\n  python: "@TINY@:data_dependent_branch"\n')
    with pytest.raises(ModelLoadError) as err:
        build(BuildOptions(recipe=recipe, target="host"))
    assert err.value.where.startswith(f"{TINY}:")
    assert "int((x > 0).sum())" in err.value.what and "\n" not in err.value.what
    assert len(err.value.what) < 300 and "torch.where" in err.value.hint
    proc = edgekit_here("build", "--recipe", str(recipe), "--target", "host")
    assert proc.returncode == 3
    assert len(proc.stderr.strip().splitlines()) <= 2, proc.stderr  # message + hint


def test_a_wrong_input_shape_is_one_line_naming_the_recipes_inputs(write_recipe):
    """Not torch.export's fake-tensor traceback nor a hint about control flow (issue 20)."""
    recipe = write_recipe('name: shape\nmodel:\n  python: "@TINY@:mlp"\n'
                          'inputs:\n  - {name: x, shape: [1, 15], dtype: float32}\n')
    proc = edgekit_here("build", "--recipe", str(recipe), "--target", "host")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "fake_tensor" not in proc.stderr, proc.stderr  # error + hint
    assert lines[0].startswith(f"error: {recipe}: inputs: the model fails on the recipe's "
                               "inputs (x [1, 15] float32): mat1 and mat2 shapes")
    assert "inputs[].shape" in lines[1] and "control flow" not in proc.stderr


def test_a_tosa_compile_failure_names_op_module_path_source_line_and_reason(write_recipe):
    # float64 math eager itself does in float64: nothing exact to legalise it to (BERT, the
    # model this used, now lowers through TOSA: pipeline/rewrite_tosa.py)
    recipe = write_recipe(f'name: f64-tosa\nmodel:\n  python: "{LEGALISATION}:float64_head"\n'
                          "lowering: tosa\n")
    with pytest.raises(LoweringError) as err:
        build(BuildOptions(recipe=recipe, target="host"))
    message = str(err.value)
    assert "tosa.cast" in err.value.ops                  # never an empty op list
    assert "@ head" in message                           # where in the model
    assert "tosa_legalisation.py:" in message            # the source line
    assert "is not profile-aligned" in message           # the compiler's own reason
    assert "loc(" not in message and "tosa: compile" in message


def test_check_names_the_failing_ops_location_and_reuses_the_whole_model(tmp_path):
    proc = edgekit_here("check", f"{TINY}:atan2_model", cwd=tmp_path,
                        env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("check: ")]
    # the whole model, its two lowerings, then only the op TOSA refused
    assert progress == ["check: whole model: import (2 op types)", "check: whole model: tosa",
                        "check: whole model: linalg", "check: op 1/1: aten::atan2"]
    assert "aten.atan2 @ forward, tiny_models.py:" in proc.stdout.replace("\n", "")


def _tiny(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location("tiny_models", TINY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)()


def test_check_and_build_name_the_real_cause_when_the_whole_import_fails(tmp_path,
                                                                         write_recipe):
    proc = edgekit_here("check", f"{TINY}:uint16_round_trip", "--json", cwd=tmp_path,
                        env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 4, proc.stderr
    report = json.loads(proc.stdout)
    assert report["failures"]["import"] == "KeyError: torch.uint16"
    blamed = [o["op"] for o in report["ops"] if o["imported"] is False]
    assert blamed == ["prims::convert_element_type"], report["ops"]  # the uint16 cast
    recipe = write_recipe('name: u16\nmodel:\n  python: "@TINY@:uint16_round_trip"\n')
    with pytest.raises(LoweringError, match="KeyError: torch.uint16") as err:
        build(BuildOptions(recipe=recipe, target="host"))
    assert "not on an op" in err.value.hint
