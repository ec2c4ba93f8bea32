"""Deploys to real lab devices: OpenSSH on 127.0.0.x, arm64 under qemu, llvmpipe Vulkan."""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from edgekit.config.devices import resolve_device
from edgekit.api.deploy import DeployOptions, deploy
from edgekit.errors import ConfigError, DeviceIncompatible, ValidationFailed
from edgekit.transport.ssh import connect
from tests.integration.helpers import edgekit

TINY_RECIPE = 'name: {name}\nmodel:\n  python: "@TINY@:{factory}"\n'


def current_of(device, app: str) -> str | None:
    link = device.host_path(f"{device.home}/.edgekit/apps/{app}/current")
    return link.readlink().name if link.is_symlink() else None


def releases_on(device, app: str) -> set[str]:
    path = device.host_path(f"{device.home}/.edgekit/apps/{app}/releases")
    return {p.name for p in path.iterdir()} if path.is_dir() else set()


def test_rpi4_deploys_to_an_aarch64_device_and_validates_there(write_recipe, arm_device):
    recipe = write_recipe(TINY_RECIPE.format(name="pi-app", factory="linear_softmax"))
    proc = edgekit("deploy", "--target", "rpi4", "--recipe", str(recipe),
                   "--host", arm_device.name, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["report"]["ok"] and result["report"]["where"] == arm_device.address
    assert result["activated"]
    assert current_of(arm_device, "pi-app") == result["release"]
    runtime = arm_device.host_path(f"{arm_device.home}/.edgekit/runtime/iree-3.13.0-aarch64/bin")
    assert (runtime / "iree-run-module").read_bytes()[:20].hex()[36:40] == "b700"  # EM_AARCH64


def test_an_identical_redeploy_moves_no_payload_and_revalidates(write_recipe, x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="same", factory="linear_softmax"))
    options = DeployOptions(recipe=recipe, target="host", host=x86_device.name)
    first = deploy(options)
    again = deploy(options)
    assert first.uploaded_bytes > 0 and first.activated
    assert (again.uploaded_files, again.uploaded_bytes) == (0, 0)
    assert not again.activated and again.report.ok and again.release == first.release


def test_a_vulkan_profile_validates_on_the_devices_llvmpipe(write_recipe, x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="gpu-app", factory="conv_mean"))
    result = deploy(DeployOptions(recipe=recipe, target="vulkan-generic", host=x86_device.name))
    assert result.report.ok and current_of(x86_device, "gpu-app") == result.release


def test_the_valhall_profile_is_refused_at_preflight_on_llvmpipe(write_recipe, x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="mali-app", factory="conv_mean"))
    proc = edgekit("deploy", "--target", "rk3588-gpu", "--recipe", str(recipe),
                   "--host", x86_device.name)
    assert proc.returncode == 14, proc.stderr
    assert "valhall" in proc.stderr and "llvmpipe" in proc.stderr
    assert "vulkan-generic" in proc.stderr  # a target that fits is suggested
    assert releases_on(x86_device, "mali-app") == set()  # nothing was uploaded


def test_a_release_that_fails_on_device_validation_never_goes_live(write_recipe, x86_device,
                                                                    tmp_path, monkeypatch):
    # A user's profile that skips the device check: valhall SPIR-V runs wrongly on llvmpipe.
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    recipe = write_recipe(TINY_RECIPE.format(name="guarded", factory="conv_mean"))
    good = deploy(DeployOptions(recipe=recipe, target="vulkan-generic", host=x86_device.name))
    with pytest.raises(ValidationFailed) as err:
        deploy(DeployOptions(recipe=recipe, target="mali-unchecked", host=x86_device.name))
    assert not err.value.report.ok
    assert "vulkan-generic" in err.value.hint
    assert current_of(x86_device, "guarded") == good.release
    assert releases_on(x86_device, "guarded") == {good.release}


def test_a_wrong_arch_bundle_is_refused_before_upload(write_recipe, x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="wrong-arch", factory="linear_softmax"))
    with pytest.raises(DeviceIncompatible, match="aarch64 code .* device is x86_64") as err:
        deploy(DeployOptions(recipe=recipe, target="rpi4", host=x86_device.name))
    assert "host" in err.value.hint
    assert releases_on(x86_device, "wrong-arch") == set()


def test_rollback_returns_to_the_previous_release_and_old_ones_are_pruned(write_recipe,
                                                                          x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="history", factory="linear_softmax"))
    first = deploy(DeployOptions(recipe=recipe, target="host", host=x86_device.name))
    second = deploy(DeployOptions(recipe=recipe, target="vulkan-generic", host=x86_device.name))
    proc = edgekit("rollback", x86_device.name, "--app", "history")
    assert proc.returncode == 0, proc.stderr
    assert current_of(x86_device, "history") == first.release
    listed = edgekit("releases", x86_device.name, "--app", "history", "--json")
    current = [r["release"] for r in json.loads(listed.stdout) if r["current"]]
    assert current == [first.release]
    other = write_recipe(TINY_RECIPE.format(name="history", factory="atan2_model"), "b.yaml")
    third = deploy(DeployOptions(recipe=other, target="host", host=x86_device.name, keep=2))
    # current (third) and the rollback target (first) stay; second is pruned
    assert releases_on(x86_device, "history") == {third.release, first.release}
    assert third.pruned == (second.release,)


def test_an_injection_attempt_in_an_app_name_creates_nothing(x86_device):
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    for command in (["releases", x86_device.name, "--app", f"x; touch {marker}"],
                    ["rollback", x86_device.name, "--app", f"$(touch {marker})"]):
        proc = edgekit(*command)
        assert proc.returncode == 2 and "invalid app name" in proc.stderr
    assert not marker.exists()
    with pytest.raises(ConfigError):
        from edgekit.device.layout import app_dir
        app_dir("../../etc")


def test_probe_reports_the_devices_own_view(arm_device):
    address, key = resolve_device(arm_device.name)
    with connect(address, key) as conn:
        from edgekit.device.probe import probe
        info = probe(conn)
    assert info.arch == "aarch64"
    assert info.has_cpu_feature("neon") is True  # from AT_HWCAP, right under emulation
    proc = edgekit("probe", arm_device.name, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["arch"] == "aarch64"


def test_tune_measures_on_the_device_and_never_activates_a_candidate(write_recipe, arm_device):
    recipe = write_recipe(TINY_RECIPE.format(name="tuned-pi", factory="linear_softmax"))
    proc = edgekit("tune", "--recipe", str(recipe), "--target", "rpi4", "--host",
                   arm_device.name, "--flag-sets", "default,data-tiling", "--lowerings",
                   "tosa,linalg", "--threads", "1", "--rounds", "2", "--repetitions", "6",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["measured_on"] == arm_device.name
    assert [c["status"] for c in record["candidates"]] == ["ok"] * 4
    assert current_of(arm_device, "tuned-pi") is None and releases_on(arm_device,
                                                                       "tuned-pi") == set()
    # deployed as tuned (one thread: local-sync): tests/device/test_tuned_on_device.py


def test_tune_reports_candidates_that_validate_wrongly_on_the_device(write_recipe, x86_device,
                                                                    tmp_path):
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    recipe = write_recipe(TINY_RECIPE.format(name="tuned-mali", factory="conv_mean"))
    proc = edgekit("tune", "--recipe", str(recipe), "--target",
                   str(tmp_path / "mali-unchecked.yaml"), "--host", x86_device.name,
                   "--lowerings", "tosa", "--rounds", "2", "--repetitions", "4")
    assert proc.returncode == 2
    assert "no candidate variant validated" in proc.stderr and "invalid" in proc.stderr


def test_quantization_variants_validate_and_time_on_the_device_leaving_it_as_it_was(
        write_recipe, arm_device, tmp_path):
    models = "edgekit.examples.models"
    recipe = write_recipe(f'name: cnn-q8\nmodel: {{python: "{models}:small_cnn"}}\nquantize: '
                          f'{{mode: int8, calibration: "{models}:small_cnn_calibration"}}\n')
    deployed = edgekit("deploy", "--target", "rpi4", "--recipe", str(recipe), "--host",
                       arm_device.name, "--json", cwd=tmp_path)
    assert deployed.returncode == 0, deployed.stderr
    release = json.loads(deployed.stdout)["release"]
    assert json.loads(deployed.stdout)["report"]["ok"]  # the int8 module validates on arm64
    proc = edgekit("build", "--recipe", str(recipe), "--target", "rpi4", "--compare-quantization",
                   "--host", arm_device.name, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {r["mode"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {"fp32", "int8", "int8-weights", "fp16"}
    for row in rows.values():  # each validated on the device, then timed there
        assert row["status"] == "built" and row["p50_ms"] > 0, row
        assert row["measured_on"].startswith(arm_device.name)
    assert rows["int8"]["quantization"]["contractions"]["integer"] == 5
    # the deployed int8 release is still current and the trial added nothing that stayed
    assert current_of(arm_device, "cnn-q8") == release
    assert releases_on(arm_device, "cnn-q8") == {release}


def test_a_prebuilt_bundle_deploys_without_its_recipe_or_the_compiler(write_recipe, x86_device,
                                                                       tmp_path):
    recipe = write_recipe(TINY_RECIPE.format(name="prebuilt", factory="linear_softmax")
                          + "hooks:\n  after_activate: 'echo $EDGEKIT_RELEASE > ~/prebuilt-hook'\n")
    built = edgekit("build", "--recipe", str(recipe), "--target", "host",
                    "--out", str(tmp_path / "b"), "--tar")
    assert built.returncode == 0, built.stderr
    recipe.unlink()
    # The deploying machine has no torch, torch-mlir, compiler or onnx: importing one fails.
    no_toolchain = ("import sys\n"
                    "for m in ('torch', 'torch_mlir', 'iree.compiler', 'onnx', 'onnxruntime'):\n"
                    "    sys.modules[m] = None\n"
                    "from edgekit.cli.main import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", no_toolchain, "deploy", str(tmp_path / "b.tar"),
                           "--host", x86_device.name, "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["report"]["ok"] and result["activated"]
    assert current_of(x86_device, "prebuilt") == result["release"]
    # the recipe's hook travelled in the bundle's manifest
    hook_output = device_file(x86_device, "prebuilt-hook")
    assert hook_output.read_text().strip() == result["release"]


def test_deploy_takes_a_bundle_or_a_recipe_and_target_but_not_both(write_recipe, x86_device):
    recipe = write_recipe(TINY_RECIPE.format(name="either", factory="linear_softmax"))
    both = edgekit("deploy", "build/x", "--recipe", str(recipe), "--target", "host",
                   "--host", x86_device.name)
    assert both.returncode == 2 and "not both" in both.stderr
    no_target = edgekit("deploy", "--recipe", str(recipe), "--host", x86_device.name)
    assert no_target.returncode == 2 and "--target" in no_target.stderr


def device_file(device, name: str) -> Path:
    return device.host_path(f"{device.home}/{name}")
