"""An NPU release on the lab's aarch64 device (which has no NPU): preflight refuses it, naming
what is missing; `--cpu-fallback` deploys the bundle's IREE CPU module, validated there."""

import json
from pathlib import Path

from edgekit import BuildOptions, build
from tests.device.test_deploy import current_of, releases_on
from tests.integration.helpers import edgekit

CNN = 'name: npu-app\nmodel:\n  python: "@TINY@:conv_mean"\n'


def test_an_npu_release_is_refused_on_a_device_without_the_npu_then_deployed_as_cpu_fallback(
        write_recipe, arm_device):
    bundle = build(BuildOptions(recipe=write_recipe(CNN), target="rk3588-npu")).bundle
    assert bundle.manifest.npu is not None

    refused = edgekit("deploy", str(bundle.path), "--host", arm_device.name)
    assert refused.returncode == 14, refused.stderr
    assert "no /dev/dri/renderD129 on the device (the rk3588 NPU's device file)" \
        in refused.stderr
    assert "librknnrt.so" in refused.stderr and "--cpu-fallback" in refused.stderr
    assert releases_on(arm_device, "npu-app") == set()          # nothing was uploaded

    proc = edgekit("deploy", str(bundle.path), "--host", arm_device.name, "--cpu-fallback",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["report"]["ok"] and result["activated"]
    assert result["report"]["where"] == arm_device.address
    assert result["npu"].startswith("--cpu-fallback")
    assert current_of(arm_device, "npu-app") == result["release"]
    # the release is the whole signed bundle: its NPU artifact travelled and verified too
    release = arm_device.host_path(
        f"{arm_device.home}/.edgekit/apps/npu-app/releases/{result['release']}")
    assert (release / "npu" / "model.rknn").read_bytes()[:4] == b"RKNN"


def test_a_fleet_of_npu_boards_without_their_npu_updates_only_with_cpu_fallback(
        write_recipe, arm_device, tmp_path):
    recipe = write_recipe(CNN.replace("npu-app", "npu-fleet"))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"devices:\n  {arm_device.name}: {{target: rk3588-npu}}\n")
    refused = edgekit("fleet", "update", "--fleet", str(fleet), "--recipe", str(recipe))
    assert refused.returncode != 0 and "renderD129" in refused.stderr
    proc = edgekit("fleet", "update", "--fleet", str(fleet), "--recipe", str(recipe),
                   "--cpu-fallback", "--json")
    assert proc.returncode == 0, proc.stderr
    outcome = json.loads(proc.stdout)["devices"][0]
    assert outcome["status"] == "updated", outcome
    assert current_of(arm_device, "npu-fleet") is not None


def test_an_ethos_u_build_with_a_float_only_op_deploys_its_cpu_module_and_validates_there(
        write_recipe, arm_device):
    """imx93-npu: the split model (conv → atan2 → conv: atan2 has no integer TOSA form) is
    refused on a device without /dev/ethosu0, and deployed with --cpu-fallback: the IREE CPU
    module (cortex-a55) of the same integer model validates on the emulated aarch64 board."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "npu_models.py"
    recipe = write_recipe(f'name: npu-split\nmodel: {{python: "{fixtures}:conv_atan2_conv"}}\n'
                          f'quantize: {{mode: int8, calibration: '
                          f'"{fixtures}:conv_atan2_conv_calibration"}}\n')
    bundle = build(BuildOptions(recipe=recipe, target="imx93-npu")).bundle
    npu = bundle.manifest.npu
    assert {op.placement for op in npu.ops} >= {"npu", "cpu"}        # an honest split
    assert any("atan2" in op.op for op in npu.ops if op.placement == "cpu")

    refused = edgekit("deploy", str(bundle.path), "--host", arm_device.name)
    assert refused.returncode == 14, refused.stderr
    assert "/dev/ethosu0" in refused.stderr
    proc = edgekit("deploy", str(bundle.path), "--host", arm_device.name, "--cpu-fallback",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["report"]["ok"] and result["activated"]
    assert current_of(arm_device, "npu-split") == result["release"]
