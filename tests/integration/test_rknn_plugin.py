"""The RK3588 NPU through the rknn-toolkit2 plugin (its own venv, made by .ci/setup.sh): the
bundle holds a .rknn that rknn's simulator ran on the golden inputs, beside the IREE CPU module
(the `--cpu-fallback` release); without the plugin, one line naming the install command."""

from pathlib import Path

from edgekit import BuildOptions, build
from tests.integration.helpers import edgekit

REPO = Path(__file__).resolve().parents[2]
SMALL_CNN_INT8 = REPO / "recipes" / "small_cnn_int8.yaml"


def test_an_int8_recipe_builds_an_rknn_validated_on_the_simulator_beside_the_cpu_module():
    result = build(BuildOptions(recipe=SMALL_CNN_INT8, target="rk3588-npu", use_cache=False))
    bundle, m = result.bundle, result.bundle.manifest
    bundle.verify()
    assert {"module.vmfb", "npu/model.rknn", "npu/rknn_report.json"} <= set(m.files)
    assert bundle.file("npu/model.rknn").read_bytes()[:4] == b"RKNN"
    assert m.arch == "aarch64" and m.backend == "llvm-cpu"       # the CPU fallback module
    n = m.npu
    assert n.kind == "rknpu" and n.accelerator == "rk3588" and n.artifact == "npu/model.rknn"
    assert n.validated_on.startswith("rknn simulator") and "NPU" not in n.validated_on
    assert n.compiler["rknn-toolkit2"] == "2.5.0"
    # every convolution of the small CNN runs on the NPU; the compiler's figures are estimates
    assert any(op.placement == "npu" and op.macs > 0 for op in n.ops)
    assert n.npu_mac_share is not None and n.npu_mac_share > 0.9
    assert n.estimate.cycles > 0 and "estimate" in n.estimate.source
    # against the quantized PyTorch model's golden outputs, under the recipe's floor (0.98)
    assert "quantized PyTorch model" in n.checks[0] and "top-1 agreement 100%" in n.checks[0]
    assert n.worst_lsb is not None and 0 <= n.worst_lsb <= 16
    assert "npu" in result.stage_seconds
    assert not list(Path.cwd().glob("check*.onnx"))      # rknn's scratch stays in its own dir


def test_a_float_model_becomes_a_float16_rknn(write_recipe):
    recipe = write_recipe('name: conv\nmodel:\n  python: "@TINY@:conv_mean"\n')
    m = build(BuildOptions(recipe=recipe, target="rk3588-npu")).bundle.manifest
    assert "float model" in m.npu.checks[0] and m.npu.report == "npu/rknn_report.json"
    cosine = float(m.npu.checks[0].split("worst cosine ")[1].split()[0])
    assert cosine >= 0.999


def test_without_the_plugin_the_build_says_what_to_install_and_exits_5(tmp_path):
    empty = tmp_path / "cache"
    empty.mkdir()
    proc = edgekit("build", "--recipe", str(SMALL_CNN_INT8), "--target", "rk3588-npu",
                   env={"EDGEKIT_CACHE_DIR": str(empty), "EDGEKIT_TOOLCHAINS_DIR": "",
                        "EDGEKIT_SHARED_TOOLCHAINS_DIR": str(tmp_path / "none")})
    assert proc.returncode == 5, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rknn toolchain" in errors[0]
    assert "`edgekit toolchains install rknn`" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("build/*"))            # nothing was built



def test_an_onnx_model_goes_to_rknn_as_it_is(write_recipe, tmp_path):
    from tests.fixtures.tiny_models import conv_mean
    from tests.integration.test_onnx_and_check import export_onnx
    model, example = conv_mean()
    export_onnx(model, example, tmp_path / "m.onnx")
    recipe = write_recipe(f"name: onnx-npu\nmodel:\n  onnx: {tmp_path / 'm.onnx'}\n")
    m = build(BuildOptions(recipe=recipe, target="rk3588-npu")).bundle.manifest
    assert m.npu.validated_on.startswith("rknn simulator")
    assert "onnxruntime" in m.npu.checks[0]           # the golden outputs' reference
