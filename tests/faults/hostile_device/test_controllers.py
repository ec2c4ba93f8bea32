"""Several controllers per device: the device's allowed signers are a set each deploy adds to
and never replaces, so one controller's failed deploy can restore the other's release, and a
key leaves the set only by `edgekit devices untrust-signer`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.config.recipe import Hooks
from edgekit.device.deploy import deploy_bundle
from edgekit.device.layout import shims_dir
from edgekit.device.provision import shim_version
from edgekit.device.releases import rollback
from edgekit.device.trust import signer_lines
from edgekit.errors import HealthGateFailed, RemoteCommandFailed
from edgekit.toolchain.signing import sign_bundle, trusted_signers
from tests.local.conftest import current_of

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def home_b(tmp_path, monkeypatch):
    """Switch to controller B: its own EDGEKIT_HOME, hence its own signing key and signers
    (call it, then sign and deploy as B)."""
    def switch():
        home = tmp_path / "home-b"
        home.mkdir(mode=0o700)
        monkeypatch.setenv("EDGEKIT_HOME", str(home))
        return home
    return switch


def device_signers(root: Path) -> list[str]:
    return signer_lines((root / ".edgekit" / "allowed_signers").read_text())


def test_b_failed_health_hook_restores_a_release_signed_by_a(make_device, v1, v2,
                                                              bundle_copy, home_b):
    device = make_device()
    a_signers = signer_lines(trusted_signers().read_text())
    first = deploy_bundle(device, v1)                       # controller A deploys v1
    home_b()
    b_bundle = bundle_copy(v2, lambda d: sign_bundle(d))    # B signs with its own key
    b_signers = signer_lines(trusted_signers().read_text())
    assert set(a_signers).isdisjoint(b_signers)
    with pytest.raises(HealthGateFailed, match=f"back on {first.release}"):
        deploy_bundle(device, b_bundle, hooks=Hooks(health="exit 3", timeout_s=30))
    assert current_of(device.root) == first.release         # A's v1, verified with A's key
    assert set(device_signers(device.root)) == set(a_signers) | set(b_signers)


def test_a_deploy_keeps_the_device_signers_it_did_not_bring(make_device, v1):
    device = make_device()
    signers = device.root / ".edgekit" / "allowed_signers"
    signers.parent.mkdir(parents=True)
    other = 'colleague namespaces="edgekit-bundle" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ7i' \
            'mq1HGoXcUkzIpuhw2GvhX2xHvGZX2PVsCH3N5dcq'
    signers.write_text(other + "\n")
    deploy_bundle(device, v1)
    assert other in device_signers(device.root)
    assert set(signer_lines(trusted_signers().read_text())) <= set(device_signers(device.root))


def test_untrust_signer_removes_a_key_and_its_releases_no_longer_verify(make_device, v1, v2,
                                                                        bundle_copy, home_b):
    device = make_device()
    first = deploy_bundle(device, v1)                       # A
    a_principal = device_signers(device.root)[0].split()[0]
    home_b()
    second = deploy_bundle(device, bundle_copy(v2, lambda d: sign_bundle(d)))   # B
    run = subprocess.run([sys.executable, "-m", "edgekit", "devices", "untrust-signer",
                          f"local:{device.root}", a_principal], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr
    assert "removed" in run.stdout
    assert all(line.split()[0] != a_principal for line in device_signers(device.root))
    with pytest.raises(RemoteCommandFailed, match="not in"):  # A's v1 no longer verifies
        rollback(device, "kws-mlp", shims_dir(shim_version()), first.release)
    assert current_of(device.root) == second.release


def test_an_older_signed_release_over_a_newer_one_is_refused_unless_allowed(make_device, v1,
                                                                            v2, bundle_copy):
    from edgekit.errors import BundleError
    from tests.local.conftest import device_journal, set_manifest
    device = make_device()
    old = bundle_copy(v1, lambda d: set_manifest(d, created_at="2026-01-01T00:00:00+00:00"))
    new = bundle_copy(v2, lambda d: set_manifest(d, created_at="2026-03-01T00:00:00+00:00"))
    first = deploy_bundle(device, old)
    third = deploy_bundle(device, new)
    with pytest.raises(BundleError, match=rf"release {first.release} \(built 2026-01-01.*"
                                          rf"older than {third.release} \(built 2026-03-01"):
        deploy_bundle(device, old)
    assert current_of(device.root) == third.release
    # rollback is not a deploy: it goes back, and a later deploy of the newest still works
    rollback(device, "kws-mlp", shims_dir(shim_version()))
    assert current_of(device.root) == first.release
    deploy_bundle(device, new)
    again = deploy_bundle(device, old, allow_downgrade=True)
    assert again.activated and current_of(device.root) == first.release
    assert ("downgrade-allowed", first.release) in device_journal(device.root)
