"""Deploy, validation, activation, rollback and pruning on a device that is a directory here."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from edgekit.config.recipe import Hooks
from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.device.releases import rollback
from edgekit.device.layout import shims_dir
from edgekit.device.provision import shim_version
from edgekit.errors import (ConfigError, DeviceIncompatible, HealthGateFailed,
                            ValidationFailed)
from tests.local.conftest import (APP, current_of, device_journal, rehash, releases_on,
                                  set_manifest)

pytestmark = pytest.mark.local


def test_a_deploy_checks_the_device_before_uploading_and_validates_before_activating(
        make_device, v1):
    device = make_device()
    stages = []
    result = deploy_bundle(device, v1, on_stage=stages.append)
    assert stages == ["preflight", "provision", "upload", "validate", "activate"]
    assert result.report.ok and result.activated and result.provisioned
    assert current_of(device.root) == result.release == release_id(v1)
    # the device's own journal: validated from the release's directory, then switched
    assert device_journal(device.root) == [("validated", result.release),
                                           ("activate", result.release)]
    assert result.device == result.report.where == f"local:{device.root}"


def test_a_bundle_for_another_arch_is_refused_before_anything_is_uploaded(make_device, v1,
                                                                         bundle_copy):
    device = make_device()
    other = "aarch64" if os.uname().machine == "x86_64" else "x86_64"
    foreign = bundle_copy(v1, lambda d: set_manifest(d, arch=other))
    with pytest.raises(DeviceIncompatible, match=f"{other} code .* device is"):
        deploy_bundle(device, foreign)
    assert not (device.root / ".edgekit" / "apps").exists()


@pytest.mark.parametrize("corruption", ["golden output", "module"])
def test_a_release_that_fails_on_device_validation_leaves_current_exactly_as_it_was(
        make_device, v1, v2, bundle_copy, corruption):
    def corrupt(directory):
        if corruption == "golden output":
            golden = directory / "golden" / "output_0.npy"
            np.save(golden, np.load(golden) * 2.0 + 1.0)
            rehash(directory, "golden/output_0.npy")
        else:
            module = directory / "module.vmfb"
            module.write_bytes(module.read_bytes()[:4096])
            rehash(directory, "module.vmfb")
    device = make_device()
    good = deploy_bundle(device, v1)
    link_before = os.readlink(device.root / ".edgekit" / "apps" / APP / "current")
    bad = bundle_copy(v2, corrupt)
    with pytest.raises(ValidationFailed, match=f"`current` still points at {good.release}") \
            as err:
        deploy_bundle(device, bad)
    assert not err.value.report.ok
    assert os.readlink(device.root / ".edgekit" / "apps" / APP / "current") == link_before
    assert releases_on(device.root) == {good.release}
    assert device_journal(device.root)[-1] == ("rejected", release_id(bad))


def test_an_identical_redeploy_moves_no_payload_and_revalidates(make_device, v1):
    device = make_device()
    first = deploy_bundle(device, v1)
    stages = []
    again = deploy_bundle(device, v1, on_stage=stages.append)
    assert first.uploaded_bytes > 0
    assert (again.uploaded_files, again.uploaded_bytes) == (0, 0)
    assert not again.activated and not again.provisioned and again.report.ok
    assert stages == ["preflight", "upload", "validate"]


def test_rollback_returns_to_the_previous_release_and_pruning_keeps_it(make_device, v1, v2,
                                                                       bundle_copy):
    device = make_device()
    v3 = bundle_copy(v1, lambda d: set_manifest(d, runtime_driver="local-sync",
                                                created_at="2100-01-01T00:00:00+00:00"))
    first = deploy_bundle(device, v1)
    second = deploy_bundle(device, v2)
    assert current_of(device.root) == second.release and second.previous == first.release
    assert rollback(device, APP, shims_dir(shim_version())) == (second.release, first.release)
    assert current_of(device.root) == first.release
    third = deploy_bundle(device, v3, keep=2)
    # current (third) and the rollback target (first) stay; second is pruned
    assert third.pruned == (second.release,)
    assert releases_on(device.root) == {third.release, first.release}


def test_rollback_after_two_deploys_of_one_build_says_why_there_is_nothing_to_go_back_to(
        make_device, v1):
    device = make_device()
    shims = shims_dir(shim_version())
    with pytest.raises(ConfigError, match=f"{APP} has no current release on the device"):
        rollback(device, APP, shims)
    first = deploy_bundle(device, v1)
    deploy_bundle(device, v1)                     # README deploys the same build twice
    with pytest.raises(ConfigError) as err:
        rollback(device, APP, shims)
    assert err.value.exit_code == 2
    assert (f"{first.release} (current) is the only release of {APP} ever activated on the "
            "device; deploying the same build again makes no new release") in str(err.value)
    assert err.value.hint.startswith(f"deploy another build of {APP} first")
    assert f"`edgekit releases {device.where} --app {APP}`" in err.value.hint
    assert current_of(device.root) == first.release


def test_a_failing_health_hook_puts_the_previous_release_back(make_device, v1, v2):
    device = make_device()
    first = deploy_bundle(device, v1)
    hooks = Hooks(after_activate='touch "$HOME/restarted-$EDGEKIT_RELEASE"',
                  health="echo model service down >&2; exit 3")
    with pytest.raises(HealthGateFailed, match="model service down") as err:
        deploy_bundle(device, v2, hooks=hooks)
    assert f"`current` is back on {first.release}" in err.value.what
    assert current_of(device.root) == first.release
    assert (device.root / f"restarted-{release_id(v2)}").is_file()  # HOME is the device's


def test_the_cli_deploys_to_a_local_directory(tmp_path, builds):
    device = tmp_path / "cli-device"
    device.mkdir()
    proc = subprocess.run([sys.executable, "-m", "edgekit.cli.main", "deploy",
                           str(builds["v1"]), "--host", f"local:{device}", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["activated"] and current_of(device) == result["release"]


def test_deploying_a_recipe_checks_the_device_before_building(tmp_path, monkeypatch):
    """A device that cannot run the target, or cannot be reached, is known before a build of
    minutes: nothing is built (issue 20, item 3)."""
    import time

    from edgekit.api.deploy import DeployOptions, deploy
    from edgekit.errors import DeviceUnreachable
    from tests.local.conftest import RECIPE
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cache"))
    other = "rpi4" if os.uname().machine == "x86_64" else "host"
    (tmp_path / "dev").mkdir()
    with pytest.raises(DeviceIncompatible,
                       match="target .* builds .* code and the device is") as err:
        deploy(DeployOptions(host=f"local:{tmp_path / 'dev'}", recipe=RECIPE, target=other))
    assert "nothing was built" in err.value.hint
    assert not (tmp_path / "cache").exists()
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # the connect retries' backoff is the transport's (tested there); here: nothing is built
    import tenacity
    monkeypatch.setattr("edgekit.transport.ssh._BACKOFF", tenacity.wait_none())
    started = time.monotonic()
    with pytest.raises(DeviceUnreachable):   # port 9 on loopback: refused at once
        deploy(DeployOptions(host="pi@127.0.0.1:9", identity=key, recipe=RECIPE,
                             target="host"))
    assert time.monotonic() - started < 30 and not (tmp_path / "cache").exists()
