"""The u8 form of int8 linears (pipeline/rewrite_int8_matmul.py) and `host`'s int8 default
(`--edgekit-int8-convs-as-matmul=u8`): the u8 form and IREE's inner-tiled data tiling only
when every contraction of the model takes it (pipeline/rewrite.py: int8_as_matmul)."""

import numpy as np

from edgekit import BuildOptions, build, validate_local
from edgekit.pipeline.rewrite import INNER_TILED

FIXTURES = "tests.fixtures"
MLP = (f'name: mlp-block\nmodel: {{python: "{FIXTURES}.tiny_u8:mlp_block"}}\n'
       f'quantize: {{mode: int8, calibration: "{FIXTURES}.tiny_u8:mlp_block_calibration"}}\n')
ATTENTION = (f'name: attention-block\n'
             f'model: {{python: "{FIXTURES}.tiny_u8:attention_block"}}\n'
             f'quantize: {{mode: int8, calibration: '
             f'"{FIXTURES}.tiny_u8:attention_block_calibration", '
             # its attention matmuls int8 too (not the default: pipeline/quantize/int8.py)
             f'activation_matmuls: int8}}\n')
MODELS = "edgekit.examples.models"
CNN = (f'name: small-cnn\nmodel: {{python: "{MODELS}:small_cnn"}}\n'
       f'quantize: {{mode: int8, calibration: "{MODELS}:small_cnn_calibration"}}\n')


def _quantized(write_recipe, text):
    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    recipe = load_recipe(write_recipe(text))
    frontend = frontend_for(recipe.model)
    return frontend.quantize(recipe, frontend.export(recipe, frontend.load(recipe))).program


def test_u8_linears_compute_what_the_int8_form_does_bit_for_bit(write_recipe, tmp_path):
    # linears of 16 rows over a 3-D activation with a nonzero zero point: uint8 rows, the
    # zero point cancelled in the integer sum, per-channel scale and bias as constants after
    from iree.runtime import load_vm_flatbuffer_file

    from edgekit.api.inspect import kernels
    plain = tmp_path / "host-plain.yaml"
    plain.write_text("extends: host\nquantize_flags: {int8: []}\n")
    bundles = {}
    for form, own in (("on", ""), ("u8", f", {INNER_TILED}")):
        # 16 rows: below the default's DEFAULT_MIN_ROWS, so the recipe asks for the path
        path = write_recipe(MLP + f"compile: {{flags: [--edgekit-int8-convs-as-matmul={form}, "
                                  "--iree-opt-data-tiling, --iree-llvmcpu-enable-ukernels=all"
                                  f"{own}]}}\n", f"{form}.yaml")
        bundles[form] = build(BuildOptions(recipe=path, target=str(plain), out=tmp_path / form,
                                           use_tuned=False)).bundle
    u8, on = bundles["u8"].manifest, bundles["on"].manifest
    assert "2 int8 linears as u8 × s8 matmuls" in u8.lowering.note, u8.lowering.note
    assert INNER_TILED in u8.compile_flags and INNER_TILED not in on.compile_flags
    assert u8.quantization.contractions.integer == 2 and not u8.quantization.contractions.f32
    assert validate_local(bundles["u8"].path).ok
    census = kernels(bundles["u8"].path).dispatches
    assert any(d.census.get("vnni vpdpbusd") for d in census), \
        [(d.function, d.census) for d in census]
    modules = {k: load_vm_flatbuffer_file(str(b.module), driver="local-sync")
               for k, b in bundles.items()}
    rng = np.random.default_rng(7)
    for scale in (0.5, 1.0, 4.0):
        x = (rng.standard_normal((1, 16, 32)) * scale).astype(np.float32)
        assert np.array_equal(np.asarray(modules["u8"].main(x)),
                              np.asarray(modules["on"].main(x)))


def test_u8_only_when_every_contraction_takes_it(write_recipe):
    from edgekit.pipeline.rewrite import int8_as_matmul
    from edgekit.pipeline.rewrite_int8_matmul import contraction_forms
    # convolutions and a one-row head: every contraction u8 x s8, the inner-tiled path added
    program, notes, flags = int8_as_matmul(_quantized(write_recipe, CNN), "u8", False)
    assert flags == (INNER_TILED,), notes
    assert contraction_forms(program) == (5, [])
    # linears of 16 rows (fewer than DEFAULT_MIN_ROWS: slower as u8): the s8 form
    mlp = _quantized(write_recipe, MLP)
    program, notes, flags = int8_as_matmul(mlp, "u8", False)
    assert flags == () and contraction_forms(program) == (0, ["aten.linear.default"] * 2), notes
    # ... unless the recipe asks for the inner-tiled path itself
    program, notes, flags = int8_as_matmul(mlp, "u8", True)
    assert flags == () and contraction_forms(program) == (2, []), notes
    # attention: its two batch matmuls have no u8 form, so none does and no inner-tiled path
    # (IREE 3.13 fails on the s8 linears' per-channel epilogues and on batch matmuls there)
    program, notes, flags = int8_as_matmul(_quantized(write_recipe, ATTENTION), "u8", False)
    assert flags == () and "the u8 form not taken" in notes[-1], notes
    u8, others = contraction_forms(program)
    assert u8 == 0 and others.count("aten.matmul.default") == 2, others
    assert not any("bitwise_xor" in str(n.target) for n in program.graph.nodes)
    # the recipe naming the inner-tiled path itself: the u8 form wherever it applies
    program, notes, flags = int8_as_matmul(_quantized(write_recipe, ATTENTION), "u8", True)
    assert flags == () and contraction_forms(program)[0] == 2, notes     # qkv, proj


def test_host_int8_attention_builds_without_the_inner_tiled_path(write_recipe, tmp_path):
    # host's default: the attention model keeps the s8 form and compiles (it failed with the
    # inner-tiled flag on); the manifest says why
    bundle = build(BuildOptions(recipe=write_recipe(ATTENTION), target="host",
                                out=tmp_path / "b", use_tuned=False)).bundle
    m = bundle.manifest
    assert INNER_TILED not in m.compile_flags
    assert "the u8 form not taken: 4 of 4 contractions" in m.lowering.note, m.lowering.note
    assert "aten.matmul.default" in m.lowering.note
    assert validate_local(bundle.path).ok
