"""Multi-variant bundles on the x86_64 lab device: one bundle, one module per CPU variant;
the device runs the best one its CPU has the features for."""

import json

from tests.device.test_deploy import current_of
from tests.integration.helpers import edgekit

RECIPE = 'name: {name}\nmodel:\n  python: "@TINY@:linear_softmax"\n'
# Granite Rapids' AMX-FP16: not in this lab's CPUs (the x86 lab device is this machine)
MISSING = "  - name: graniterapids-amx-fp16\n    cpu: {cpu: graniterapids, features: \"+amx-fp16\"}\n"
AVX2 = "  - name: x86-64-v3\n    cpu: {cpu: x86-64-v3, features: \"+avx2,+fma\"}\n"


def _deploy(write_recipe, tmp_path, device, name, variants):
    profile = tmp_path / f"{name}.yaml"
    profile.write_text("extends: host\ncpu:\n  cpu: x86-64-v2\nvariants:\n" + variants)
    recipe = write_recipe(RECIPE.format(name=name), f"{name}-recipe.yaml")
    proc = edgekit("deploy", "--recipe", str(recipe), "--target", str(profile), "--host",
                   device.name, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["report"]["ok"] and current_of(device, name) == result["release"]
    run_env = device.host_path(f"{device.home}/.edgekit/apps/{name}/releases/"
                               f"{result['release']}/run.env").read_text()
    return result, run_env


def test_a_variant_needing_a_feature_the_cpu_lacks_is_skipped_and_the_baseline_runs(
        write_recipe, tmp_path, x86_device):
    result, run_env = _deploy(write_recipe, tmp_path, x86_device, "variant-skip", MISSING)
    assert result["variant"] is None
    assert result["variants_skipped"] == [
        "graniterapids-amx-fp16: the device's CPU lacks amx-fp16"]
    assert "MODULE=module.vmfb" in run_env      # what validation ran, and what bench runs


def test_the_best_variant_the_cpu_supports_is_picked_and_validated(write_recipe, tmp_path,
                                                                   x86_device):
    result, run_env = _deploy(write_recipe, tmp_path, x86_device, "variant-pick",
                              MISSING + AVX2)
    assert result["variant"] == "x86-64-v3"
    assert "MODULE=variants/x86-64-v3.vmfb" in run_env
    # the release id covers every variant: the same model without them is another release
    alone, _ = _deploy(write_recipe, tmp_path, x86_device, "variant-pick", AVX2)
    assert alone["release"] != result["release"]
