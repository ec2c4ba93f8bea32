"""`edgekit inspect BUNDLE --kernels` on real cross-compiled Arm builds (issue 37): what the
hot loops of the small CNN's dispatches are made of, read from the modules with Debian's LLVM
(llvm-objdump, llvm-dwarfdump, llvm-mca). No board: the cycle counts are estimates."""

import json


from edgekit.api.inspect import kernels
from edgekit import BuildOptions, build
from tests.integration.helpers import edgekit

MODELS = "edgekit.examples.models"
CNN = f'name: small-cnn\nmodel: {{python: "{MODELS}:small_cnn"}}\n'
INT8 = CNN + f'quantize: {{mode: int8, calibration: "{MODELS}:small_cnn_calibration"}}\n'


def contractions(found) -> list:
    """The dispatches that multiply (convolutions, matmuls), not copies or reductions."""
    return [d for d in found.dispatches
            if any(k in d.function for k in ("conv", "matmul", "matvec"))]


def dot_products(census: dict) -> int:
    return sum(census.get(k, 0) for k in ("sdot", "udot", "usdot", "sudot", "smmla", "ummla",
                                          "usmmla"))


def test_rpi4_fp32_hot_loops_carry_vector_fmas(write_recipe, tmp_path):
    bundle = build(BuildOptions(recipe=write_recipe(CNN), target="rpi4", out=tmp_path / "b",
                                use_tuned=False)).bundle
    run = edgekit("inspect", str(bundle.path), "--kernels", "--json")
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert found["arch"] == "aarch64" and found["cpu"] == "cortex-a72"
    convs = [d for d in found["dispatches"] if "conv" in d["function"]]
    assert len(convs) == 4
    for d in convs:
        lanes = {k: v for k, v in d["census"].items() if k.startswith("fmla.")}
        assert lanes, d                                   # vector FMAs, not scalar fallbacks
        assert d["cycles_per_iteration"] > 0 and "estimate" in d["estimate_note"]


def test_rpi5_int8_matmuls_run_on_sdot_where_direct_convolutions_do_not(write_recipe, tmp_path):
    # the rpi5 profile's int8 flags: convolutions as int8 im2col + integer matmul, data-tiled
    bundle = build(BuildOptions(recipe=write_recipe(INT8), target="rpi5", out=tmp_path / "new",
                                use_tuned=False)).bundle
    assert "4 of 4 int8 convolutions as int8 im2col" in bundle.manifest.lowering.note
    found = kernels(bundle.path)
    assert found.cpu == "cortex-a76"
    integer = [d for d in contractions(found) if "i8xi8xi32" in d.function]
    assert len(integer) == 5, [d.function for d in integer]    # 4 convolutions + the head
    assert all(dot_products(d.census) for d in integer), [(d.function, d.census)
                                                          for d in integer]
    # IREE's own lowering of the same int8 convolutions (the profile's rewrite left out):
    # widening multiply-accumulates (smlal), no dot product anywhere in their hot loops
    plain = tmp_path / "rpi5-plain.yaml"
    plain.write_text("extends: rpi5\nquantize_flags: {int8: [--iree-opt-data-tiling]}\n")
    direct = build(BuildOptions(recipe=write_recipe(INT8, "int8.yaml"), target=str(plain),
                                out=tmp_path / "old", use_tuned=False)).bundle
    convs = [d for d in contractions(kernels(direct.path)) if "conv" in d.function]
    assert len(convs) == 4
    assert all(dot_products(d.census) == 0 for d in convs)
    assert all(d.census.get("widening int (no dot product)", 0) for d in convs[:3])


def test_inspect_refuses_a_module_without_cpu_code(tmp_path):
    run = edgekit("inspect", str(tmp_path), "--kernels")
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) <= 3, run.stderr


def test_the_int8_im2col_rewrite_computes_what_the_quantized_model_does(write_recipe, tmp_path):
    import numpy as np
    import torch

    from edgekit import validate_local
    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.pipeline.rewrite_int8 import int8_convs_as_matmul
    recipe = load_recipe(write_recipe(INT8))
    frontend = frontend_for(recipe.model)
    quantized = frontend.quantize(recipe, frontend.export(recipe, frontend.load(recipe))).program
    rewritten, count, total = int8_convs_as_matmul(quantized)
    assert (count, total) == (4, 4)
    names = {str(n.target) for n in rewritten.graph.nodes}
    assert "aten.conv2d.default" not in names and "aten.index_select.default" in names
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((2, 1, 3, 32, 32),
                                                                    dtype=np.float32))
    for sample in x:          # integer arithmetic: the same values, not merely close ones
        assert torch.equal(quantized.module()(sample), rewritten.module()(sample))
    # on this machine (x86): the module with the rewrite validates against the golden outputs
    path = write_recipe(INT8 + "compile: {flags: [--edgekit-int8-convs-as-matmul=on, "
                               "--iree-opt-data-tiling]}\n", "host.yaml")
    bundle = build(BuildOptions(recipe=path, target="host", out=tmp_path / "host",
                                use_tuned=False)).bundle
    assert bundle.manifest.quantization.contractions.integer == 5
    assert validate_local(bundle.path).ok
    census = kernels(bundle.path).dispatches
    assert any(k.startswith("vnni") for d in census for k in d.census), \
        [(d.function, d.census) for d in census]


def test_the_u8_form_runs_on_vpdpbusd_and_computes_what_the_int8_form_does(write_recipe, tmp_path):
    # x86 VNNI: uint8 patches make u8 x s8 matmuls, which IREE's inner-tiled data tiling puts
    # on vpdpbusd; integer sums and the same float epilogue: the outputs bit for bit
    import numpy as np
    from iree.runtime import load_vm_flatbuffer_file

    from edgekit import validate_local
    plain = tmp_path / "host-plain.yaml"
    plain.write_text("extends: host\nquantize_flags: {int8: []}\n")
    bundles = {}
    tiled = "--iree-llvmcpu-enable-inner-tiled, --iree-llvmcpu-enable-ukernels=all"
    # u8 on both of IREE's data-tiling paths (bench/quantization_flags.py times them)
    for name, form, flags in (("on", "on", "--iree-opt-data-tiling"),
                              ("u8", "u8", f"--iree-opt-data-tiling, {tiled}"),
                              ("u8-global", "u8", f"--iree-global-opt-data-tiling, {tiled}")):
        path = write_recipe(INT8 + f"compile: {{flags: [--edgekit-int8-convs-as-matmul={form}, "
                                   f"{flags}]}}\n", f"{name}.yaml")
        bundles[name] = build(BuildOptions(recipe=path, target=str(plain), out=tmp_path / name,
                                           use_tuned=False)).bundle
    for name in ("u8", "u8-global"):
        u8 = bundles[name]
        assert "4 of 4 int8 convolutions" in u8.manifest.lowering.note
        assert u8.manifest.quantization.contractions.integer == 5    # 4 convolutions + head
        assert validate_local(u8.path).ok
        census = kernels(u8.path).dispatches
        assert any(d.census.get("vnni vpdpbusd") for d in census), \
            [(name, d.function, d.census) for d in census]
    modules = {k: load_vm_flatbuffer_file(str(b.module), driver="local-sync")
               for k, b in bundles.items()}
    rng = np.random.default_rng(5)
    for scale in (0.5, 1.0, 3.0):
        x = (rng.standard_normal((1, 3, 32, 32)) * scale).astype(np.float32)
        for name in ("u8", "u8-global"):
            assert np.array_equal(np.asarray(modules[name].main(x)),
                                  np.asarray(modules["on"].main(x))), name


def test_the_u8_form_is_the_quantized_model_up_to_float_rounding(write_recipe):
    # eager PyTorch sums the dequantized values in float, so only close here (the modules
    # compute integer sums: the test above)
    import torch

    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.pipeline.rewrite_int8 import int8_convs_as_matmul
    recipe = load_recipe(write_recipe(INT8))
    frontend = frontend_for(recipe.model)
    quantized = frontend.quantize(recipe, frontend.export(recipe, frontend.load(recipe))).program
    rewritten, count, total = int8_convs_as_matmul(quantized, unsigned=True)
    assert (count, total) == (4, 4)
    targets = [str(n.target) for n in rewritten.graph.nodes]
    assert "aten.conv2d.default" not in targets and "aten.bitwise_xor.Tensor" in targets
    # requantization as multiply, clamp and round by ±1.5·2²³ (PyTorch's own formula)
    assert "quantized_decomposed.quantize_per_tensor.default" not in targets, targets
    # no NCHW permute between convolutions: the input's and the mean's are left (the weights
    # are stored rearranged)
    assert targets.count("aten.permute.default") == 2, targets
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    expected, got = quantized.module()(x), rewritten.module()(x)
    assert torch.allclose(expected, got, rtol=0, atol=1e-6), (expected - got).abs().max()
