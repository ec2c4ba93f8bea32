import json

import pytest

from edgekit.config.recipe import load_recipe, recipe_json_schema
from edgekit.errors import ConfigError


def test_a_misspelled_key_names_file_line_key_and_the_likely_fix(write_recipe):
    path = write_recipe("""
        name: demo
        model:
          python: "@TINY@:linear_softmax"
        lowerng: tosa
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:4"
    assert err.value.key == "lowerng"
    assert "did you mean 'lowering'" in err.value.hint
    assert err.value.exit_code == 2


def test_a_nested_unknown_key_lists_the_keys_of_its_own_section(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:linear_softmax"
        validation:
          atol: 0.1
          min_cosin: 0.9
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:5"
    assert err.value.key == "validation.min_cosin"
    assert "min_cosine" in err.value.hint and "outputs" in err.value.hint


def test_a_bad_value_says_what_is_expected(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:linear_softmax"
        lowering: spirv
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:3"
    assert "'auto', 'tosa', 'linalg' or 'torch'" in err.value.what


def test_a_bad_item_in_a_list_points_at_that_item(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:mlp"
        inputs:
          - name: x
            shape: [1, 16]
          - name: y
            shape: [1, 16]
            dtype: float128
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:8"
    assert err.value.key == "inputs.1.dtype"


def test_the_model_needs_exactly_one_source(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:mlp"
          exported: model.pt2
    """)
    with pytest.raises(ConfigError, match="exactly one"):
        load_recipe(path)


def test_undeclared_dynamic_dims_are_refused(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:mlp"
        inputs:
          - name: x
            shape: [batch, 16]
    """)
    with pytest.raises(ConfigError, match="dynamic dim 'batch'"):
        load_recipe(path)


def test_yaml_syntax_errors_and_duplicate_keys_name_their_line(write_recipe):
    broken = write_recipe("model:\n  python: [unclosed\n", name="broken.yaml")
    with pytest.raises(ConfigError) as err:
        load_recipe(broken)
    assert err.value.where.startswith(f"{broken}:")
    dup = write_recipe("model:\n  python: a:b\nseed: 1\nseed: 2\n", name="dup.yaml")
    with pytest.raises(ConfigError) as err:
        load_recipe(dup)
    assert err.value.where == f"{dup}:4" and "duplicate" in err.value.what


def test_a_missing_samples_file_is_named_with_its_line(write_recipe):
    path = write_recipe("""
        model:
          python: "@TINY@:mlp"
        samples: nowhere.npz
    """)
    with pytest.raises(ConfigError) as err:
        load_recipe(path)
    assert err.value.where == f"{path}:3" and "nowhere.npz" in err.value.what


def test_the_app_name_defaults_to_the_file_name_and_paths_resolve_beside_it(write_recipe):
    recipe = load_recipe(write_recipe('model:\n  python: "@TINY@:mlp"\n', name="kws.yaml"))
    assert recipe.name == "kws"
    assert recipe.resolve("x.npz") == recipe.path.parent / "x.npz"


def test_per_output_tolerances_override_the_defaults(write_recipe):
    recipe = load_recipe(write_recipe("""
        model:
          python: "@TINY@:mlp"
        validation:
          atol: 0.5
          outputs:
            output_1: {atol: 0.01}
    """))
    assert recipe.validation.for_output("output_0").atol == 0.5
    assert recipe.validation.for_output("output_1").atol == 0.01


def test_the_json_schema_describes_recipe_keys():
    schema = recipe_json_schema()
    json.dumps(schema)
    assert {"model", "inputs", "lowering", "validation"} <= set(schema["properties"])


def test_quantize_shorthand_and_int8_needs_calibration(tmp_path):
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    ok = tmp_path / "ok.yaml"
    ok.write_text('model: {python: "m:f"}\nquantize: fp16\n')
    assert load_recipe(ok).quantize.mode == "fp16" and load_recipe(ok).quantize.weights is None
    weights = tmp_path / "w.yaml"
    weights.write_text('model: {python: "m:f"}\nquantize: int8-weights\n')
    assert load_recipe(weights).quantize.weights == "per-tensor"
    bad = tmp_path / "bad.yaml"
    bad.write_text('name: x\nmodel: {python: "m:f"}\nquantize: int8\n')
    with pytest.raises(ConfigError) as err:
        load_recipe(bad)
    assert "bad.yaml:3" in str(err.value) and "calibration" in str(err.value)
    missing = tmp_path / "missing.yaml"
    missing.write_text('model: {python: "m:f"}\nquantize: {mode: int8, calibration: no.npz}\n')
    with pytest.raises(ConfigError, match="file not found"):
        load_recipe(missing)


@pytest.mark.parametrize("model, quantize, message", [
    ("onnx: m.onnx", "{mode: int8, calibration: c.npz}", "ONNX model is quantized before"),
    ("onnx: m.onnx", "fp16", "ONNX model is quantized before"),
    ('python: "m:f"', "{mode: int8, calibration: c.npz, float_model: f.onnx}",
     "`float_model` is for ONNX QDQ models"),
])
def test_quantize_fits_the_model_source(tmp_path, model, quantize, message):
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    (tmp_path / "m.onnx").write_bytes(b"")
    path = tmp_path / "r.yaml"
    path.write_text(f"name: x\nmodel: {{{model}}}\nquantize: {quantize}\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_recipe(path)
    assert "r.yaml:3" in str(err.value)
    onnx_ok = tmp_path / "ok.yaml"
    onnx_ok.write_text("model: {onnx: m.onnx}\nquantize: {mode: int8, allow_float_contractions: "
                       "true}\n")
    assert load_recipe(onnx_ok).quantize.allow_float_contractions
