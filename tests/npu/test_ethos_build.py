"""Ethos-U builds with the real toolchains (ExecuTorch's Arm backend, tosa-tools, Vela, IREE)
on tiny models: integer TOSA that passes the strict PRO-INT check, the TOSA reference model
within 1 LSB of the quantized PyTorch model, Vela's report, an honest split."""

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml

from edgekit import BuildOptions, build, validate_local
from edgekit.config.profiles import load_target
from edgekit.errors import CannotRunHere, LoweringError, ToolchainMissing
from edgekit.pipeline.npu import ethos
from edgekit.pipeline.npu.registry import family_named
from edgekit.toolchain import tosa
from edgekit.toolchain.runner import run_tool
from tests.integration.helpers import edgekit

RECIPES = "edgekit.examples.models"
# by file: the CLI runs in a child from another directory, where `tests` is no package
FIXTURE = str(Path(__file__).resolve().parents[1] / "fixtures" / "npu_models.py")


def recipe(write_recipe, name: str, model: str, calibration: str) -> object:
    return write_recipe(f'name: {name}\nmodel: {{python: "{model}"}}\n'
                        f'quantize: {{mode: int8, calibration: "{calibration}"}}\n')


@pytest.fixture(scope="module")
def small_cnn_imx93(tmp_path_factory):
    where = tmp_path_factory.mktemp("imx93")
    path = where / "cnn.yaml"
    path.write_text(f'name: small-cnn\nmodel: {{python: "{RECIPES}:small_cnn"}}\n'
                    f'quantize: {{mode: int8, calibration: "{RECIPES}:small_cnn_calibration"}}\n')
    return build(BuildOptions(recipe=path, target="imx93-npu", out=where / "bundle")).bundle


def test_the_int8_cnn_is_proven_on_the_tosa_reference_model(small_cnn_imx93):
    npu = small_cnn_imx93.manifest.npu
    assert npu.validated_on == "TOSA reference model"
    assert npu.worst_lsb is not None and npu.worst_lsb <= 1
    assert any("strict TOSA 1.0 PRO-INT" in c for c in npu.checks)
    iree_check = next(c for c in npu.checks if c.startswith("IREE"))
    assert int(iree_check.split("worst ")[1].split(" LSB")[0]) <= 1
    assert iree_check.endswith("(vs the reference model: 0 LSB)")   # two executors agree


def test_vela_report_is_in_the_bundle_with_cycles(small_cnn_imx93):
    bundle = small_cnn_imx93
    npu = bundle.manifest.npu
    assert npu.estimate.cycles > 0 and npu.estimate.inferences_per_s > 0
    assert "estimate" in npu.estimate.source
    with bundle.file(npu.report).open() as f:
        assert int(float(next(csv.DictReader(f))["cycles_total"])) == npu.estimate.cycles
    assert npu.artifact in bundle.manifest.files and npu.report in bundle.manifest.files
    bundle.verify()                               # npu/ files listed with their sha256
    assert bundle.module.is_file()                # the CPU module of the same integer model
    assert npu.npu_mac_share == pytest.approx(1.0)
    versions = bundle.manifest.toolchain
    assert versions["executorch"] == "1.5.1" and versions["ethos-u-vela"] == "5.2.0"


def test_the_partition_passes_the_strict_check_and_float_tosa_does_not(small_cnn_imx93,
                                                                       tmp_path):
    part = small_cnn_imx93.file("npu/part0.tosa")
    mlir = tmp_path / "part0.mlir"
    run_tool(tosa.deserialize_argv(part, mlir), what="deserialize")
    ethos._strict_check(mlir, tmp_path / "again.tosa", "part0")    # passes: no raise
    # the same graph with a float convolution is not PRO-INT: refused, op named
    text = mlir.read_text()
    floated = tmp_path / "float.mlir"
    floated.write_text("""module {
  func.func @main(%x: tensor<1x4xf32>, %y: tensor<1x4xf32>) -> tensor<1x4xf32> {
    %0 = tosa.maximum %x, %y : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
    return %0 : tensor<1x4xf32>
  }
}
""")
    assert "tosa.conv2d" in text
    with pytest.raises(LoweringError) as err:
        ethos._strict_check(floated, tmp_path / "float.tosa", "float")
    assert err.value.stage == "strict PRO-INT check"
    assert "tosa.maximum" in err.value.ops


def test_a_float_only_op_splits_the_model_and_its_cpu_module_validates(write_recipe,
                                                                       tmp_path):
    path = recipe(write_recipe, "atan2", f"{FIXTURE}:conv_atan2_conv",
                  f"{FIXTURE}:conv_atan2_conv_calibration")
    # imx93-npu's NPU on this machine's CPU: the CPU fallback module can run here
    npu_spec = load_target("imx93-npu").npu.model_dump(mode="json", exclude_none=True)
    profile = tmp_path / "host-u65.yaml"
    profile.write_text(yaml.safe_dump({"description": "host + Ethos-U65", "extends": "host",
                                       "npu": npu_spec}))
    bundle = build(BuildOptions(recipe=path, target=str(profile))).bundle
    report = validate_local(bundle.path)     # the same integer model, on the host's CPU
    assert report.ok
    npu = bundle.manifest.npu
    placed = {o.op: o for o in npu.ops}
    assert placed["atan2"].placement == "cpu" and "TOSA-1.0+INT" in placed["atan2"].reason
    assert placed["convolution"].placement == "npu"
    assert "2 partition(s)" in " ".join(npu.checks)      # the op cuts the NPU graph in two
    assert npu.worst_lsb <= 1


def test_check_lists_each_op_with_where_it_runs():
    done = edgekit("check", f"{FIXTURE}:conv_atan2_conv", "--target", "imx93-npu", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    where = {r["op"]: r["placement"] for r in report["ops"]}
    assert where["atan2"] == "cpu" and where["convolution"] == "npu"
    assert report["buildable"] is True


def test_microcontroller_npu_builds_artifact_only_and_deploy_refuses(write_recipe, tmp_path):
    path = recipe(write_recipe, "cnn-u85", f"{RECIPES}:small_cnn",
                  f"{RECIPES}:small_cnn_calibration")
    bundle = build(BuildOptions(recipe=path, target="ethos-u85-256",
                                out=tmp_path / "u85")).bundle
    assert not bundle.module.exists() and "module.vmfb" not in bundle.manifest.files
    assert bundle.manifest.npu.estimate.cycles > 0
    from edgekit.device.deploy import refuse_npu_only
    with pytest.raises(CannotRunHere, match="estimates only"):
        refuse_npu_only(bundle.manifest.target, bundle.manifest.backend)
    done = edgekit("deploy", str(tmp_path / "u85"), "--host", "127.0.0.1")
    assert done.returncode == 7 and done.stderr.count("error:") == 1


def test_an_op_without_integer_form_is_refused_where_there_is_no_cpu(write_recipe):
    path = recipe(write_recipe, "atan2-u55", f"{FIXTURE}:conv_atan2_conv",
                  f"{FIXTURE}:conv_atan2_conv_calibration")
    done = edgekit("build", "--recipe", str(path), "--target", "ethos-u55-128")
    assert done.returncode == 4
    assert "atan2" in done.stderr and "stage partition (npu)" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_the_npu_toolchains_one_line_names_the_install(write_recipe, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("EDGEKIT_TOOLCHAINS_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("EDGEKIT_SHARED_TOOLCHAINS_DIR", str(tmp_path / "none"))
    path = recipe(write_recipe, "cnn", f"{RECIPES}:small_cnn", f"{RECIPES}:small_cnn_calibration")
    done = edgekit("build", "--recipe", str(path), "--target", "imx93-npu")
    assert done.returncode == 5
    assert "edgekit toolchains install npu" in done.stderr
    assert "Traceback" not in done.stderr
    with pytest.raises(ToolchainMissing):
        family_named("ethos-u").versions()
    shutil.rmtree(tmp_path / "none", ignore_errors=True)


def test_a_model_executorch_refuses_is_one_line_naming_the_op(write_recipe):
    path = recipe(write_recipe, "erfinv", f"{FIXTURE}:conv_erfinv",
                  f"{FIXTURE}:conv_erfinv_calibration")
    done = edgekit("build", "--recipe", str(path), "--target", "imx93-npu")
    assert done.returncode == 4, done.stderr[-1000:]
    assert "erfinv" in done.stderr and "stage quantize+partition (npu)" in done.stderr
    assert "Traceback" not in done.stderr
