"""runtime_shims/install_bundle.sh on a device that is a directory here: stage, validate on the
device (no controller), activate with hooks, roll back — the pull agent's and the Mender
module's state machine, with the same journal as a pushed deploy."""

import json
import os
import subprocess

import numpy as np
import pytest

from edgekit.channel import payload as payload_mod
from edgekit.channel.payload import PLAN, write_payload
from edgekit.config.recipe import Hooks
from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.device.layout import shims_dir
from edgekit.device.probe import probe
from edgekit.device.provision import provision, shim_version
from edgekit.device.trust import install_signers
from edgekit.models.bundle import MANIFEST, load_bundle
from tests.local.conftest import APP, current_of, device_journal, rehash, releases_on

pytestmark = pytest.mark.local


def ready(device, bundle):
    """A device with the runtime, the shims and the user's signers, and nothing deployed."""
    provision(device, probe(device), bundle.manifest.compiler_version)
    install_signers(device)


def install(device, *args):
    shim = device.root / shims_dir(shim_version()) / "install_bundle.sh"
    return subprocess.run(["sh", str(shim), args[0], str(device.root / ".edgekit"), *args[1:]],
                          capture_output=True, text=True, cwd=device.root, timeout=300,
                          env={**os.environ, "HOME": str(device.root)})


def test_stage_validate_then_activate_then_rollback_journal_as_a_pushed_deploy(
        make_device, v1, v2, tmp_path):
    device = make_device()
    ready(device, v1)
    one = write_payload(v1, tmp_path / "p1")
    staged = install(device, "stage-validate", APP, str(one.directory))
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout.split()[-1] == one.release == release_id(v1)
    assert "ok (max abs error" in staged.stderr        # each output's comparison, here
    assert current_of(device.root) is None            # staging never switches
    done = install(device, "activate", APP, one.release)
    assert done.returncode == 0, done.stderr
    assert current_of(device.root) == one.release
    two = write_payload(v2, tmp_path / "p2")
    assert install(device, "stage-validate", APP, str(two.directory)).returncode == 0
    assert install(device, "activate", APP, two.release).returncode == 0
    assert current_of(device.root) == two.release
    back = install(device, "rollback", APP)
    assert back.returncode == 0, back.stderr
    assert current_of(device.root) == one.release
    assert device_journal(device.root) == [
        ("validated", one.release), ("activate", one.release), ("validated", two.release),
        ("activate", two.release), ("activate", one.release), ("rollback", one.release)]
    newest = (device.root / ".edgekit" / "apps" / APP / "newest").read_text().split()
    assert newest[1] in (one.release, two.release)


def test_a_release_pushed_before_is_the_rollback_target_of_a_pulled_one(make_device, v1, v2,
                                                                        tmp_path):
    device = make_device()
    pushed = deploy_bundle(device, v1)
    pulled = write_payload(v2, tmp_path / "p2")
    assert install(device, "stage-validate", APP, str(pulled.directory)).returncode == 0
    assert install(device, "activate", APP, pulled.release).returncode == 0
    assert install(device, "rollback", APP).returncode == 0
    assert current_of(device.root) == pushed.release


def test_wrong_outputs_are_rejected_on_the_device_and_nothing_changes(
        make_device, v1, v2, bundle_copy, tmp_path):
    def corrupt(directory):
        golden = directory / "golden" / "output_0.npy"
        np.save(golden, np.load(golden) * 2.0 + 1.0)
        rehash(directory, "golden/output_0.npy")
    device = make_device()
    good = deploy_bundle(device, v1)
    bad = write_payload(bundle_copy(v2, corrupt), tmp_path / "bad")
    before = sorted(releases_on(device.root))
    result = install(device, "stage-validate", APP, str(bad.directory))
    assert result.returncode == 3, result.stderr
    assert "max abs error" in result.stderr and "was not activated" in result.stderr
    assert current_of(device.root) == good.release
    assert sorted(releases_on(device.root)) == before
    assert device_journal(device.root)[-1] == ("rejected", bad.release)
    # and it cannot be activated by name
    refused = install(device, "activate", APP, bad.release)
    assert refused.returncode == 1 and current_of(device.root) == good.release


def test_a_loosened_plan_is_refused_by_its_signature_with_nothing_staged(make_device, v1,
                                                                        tmp_path):
    device = make_device()
    ready(device, v1)
    p = write_payload(v1, tmp_path / "p")
    plan = p.directory / PLAN
    plan.write_text(plan.read_text().replace(" 0.0001 ", " 1000.0 "))
    result = install(device, "stage-validate", APP, str(p.directory))
    assert result.returncode == 1 and "does not match its signature" in result.stderr
    assert releases_on(device.root) == set()


def test_a_failing_health_hook_puts_the_previous_release_back(make_device, v1, v2,
                                                              bundle_copy, tmp_path):
    def hooked(directory):
        manifest = json.loads((directory / MANIFEST).read_text())
        manifest["hooks"] = Hooks(health="echo unhealthy >&2; exit 3",
                                  timeout_s=20).model_dump(mode="json")
        (directory / MANIFEST).write_text(json.dumps(manifest))
        rehash(directory, "module.vmfb")
    device = make_device()
    good = deploy_bundle(device, v1)
    p = write_payload(bundle_copy(v2, hooked), tmp_path / "p")
    assert install(device, "stage-validate", APP, str(p.directory)).returncode == 0
    result = install(device, "activate", APP, p.release)
    assert result.returncode == 1
    assert "health hook exited with 3" in result.stderr
    assert current_of(device.root) == good.release
    assert device_journal(device.root)[-4:] == [
        ("activate", p.release), ("health-failed", p.release), ("activate", good.release),
        ("rollback", good.release)]


def zero(directory):
    """Every validation sample's golden output: all zero (what a zero-initialised head gives)."""
    manifest = json.loads((directory / MANIFEST).read_text())
    for sample in [manifest["golden_outputs"], *(s["outputs"] for s in manifest["more_golden"])]:
        golden = directory / sample[0]
        np.save(golden, np.zeros_like(np.load(golden)))
        rehash(directory, sample[0])


def test_golden_outputs_that_prove_nothing_are_refused_on_the_device(
        make_device, v1, bundle_copy, tmp_path, monkeypatch):
    device = make_device()
    ready(device, v1)
    # the host refuses it too (validate/golden.py); here the device's own check is tested
    monkeypatch.setattr(payload_mod, "check_golden", lambda *a, **k: None)
    p = write_payload(bundle_copy(v1, zero), tmp_path / "p")
    result = install(device, "stage-validate", APP, str(p.directory))
    assert result.returncode == 3, result.stderr
    assert "cannot tell a right module from a wrong one: all" in result.stderr
    assert current_of(device.root) is None and releases_on(device.root) == set()


def test_the_host_refuses_to_write_a_payload_whose_goldens_prove_nothing(v1, bundle_copy,
                                                                         tmp_path):
    with pytest.raises(payload_mod.UninformativeGolden):
        write_payload(load_bundle(bundle_copy(v1, zero).path), tmp_path / "p")
