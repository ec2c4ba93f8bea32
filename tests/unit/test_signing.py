"""Bundle signatures with the real ssh-keygen: a key of edgekit's own created on first use,
verification against allowed_signers, and the tampering the signature must catch."""

import json
import os
import stat
import subprocess

import numpy as np
import pytest

from edgekit.device.deploy import release_id
from edgekit.errors import BundleNotTrusted, ConfigError
from edgekit.models.bundle import MANIFEST, SIGNATURE, load_bundle, sha256_file
from edgekit.toolchain.signing import (sign_bundle, signer_fingerprint, trusted_signers,
                                       verify_bundle)
from tests.unit.test_bundle_containment import tiny_bundle


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh $EDGEKIT_HOME: no key, no allowed_signers yet."""
    path = tmp_path / "home"
    monkeypatch.setenv("EDGEKIT_HOME", str(path))
    monkeypatch.delenv("EDGEKIT_SIGNING_KEY", raising=False)
    monkeypatch.delenv("EDGEKIT_ALLOWED_SIGNERS", raising=False)
    return path


@pytest.fixture
def signed(home, tmp_path):
    directory = tiny_bundle(tmp_path / "b")
    sign_bundle(directory)
    return directory


def edit_manifest(directory, change) -> None:
    manifest = json.loads((directory / MANIFEST).read_text())
    change(manifest)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def test_the_signing_key_is_made_on_first_use_readable_only_by_its_owner(home, signed):
    key = home / "keys" / "bundle_ed25519"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    public = (home / "keys" / "bundle_ed25519.pub").read_text().split()
    assert public[0] == "ssh-ed25519"
    line = (home / "allowed_signers").read_text().splitlines()
    assert len(line) == 1 and 'namespaces="edgekit-bundle"' in line[0] and public[1] in line[0]
    sign_bundle(signed)   # a second signature: the same key, no second line
    assert len((home / "allowed_signers").read_text().splitlines()) == 1


def test_a_signed_bundle_verifies_and_names_its_signer(signed):
    principal = verify_bundle(signed)
    assert principal and principal in trusted_signers().read_text()


def test_an_unsigned_bundle_is_not_trusted(home, tmp_path):
    directory = tiny_bundle(tmp_path / "b")
    with pytest.raises(BundleNotTrusted, match="not signed") as err:
        verify_bundle(directory)
    assert err.value.exit_code == 6 and "--allow-unsigned" in err.value.hint


def test_a_manifest_only_tamper_fails_the_signature_and_is_another_release(signed):
    before = release_id(load_bundle(signed))
    edit_manifest(signed, lambda m: m.update(tolerances={"atol": 1e9, "min_cosine": -1.0}))
    with pytest.raises(BundleNotTrusted, match="does not match its signature"):
        verify_bundle(signed)
    assert release_id(load_bundle(signed)) != before


def test_a_release_id_covers_the_tolerances_but_not_the_build_time(signed, tmp_path):
    bundle = load_bundle(signed)
    looser = bundle.manifest.model_copy(update={"tolerances": bundle.manifest.tolerances
                                                .model_copy(update={"atol": 0.5})})
    later = bundle.manifest.model_copy(update={"created_at": "2030-01-01T00:00:00+00:00"})
    ids = {release_id(type(bundle)(signed, m)) for m in (bundle.manifest, looser, later)}
    assert len(ids) == 2 and release_id(type(bundle)(signed, later)) == release_id(bundle)


def test_swapping_module_goldens_and_a_rehashed_manifest_fails_the_signature(signed):
    (signed / "module.vmfb").write_bytes(b"another model")
    np.save(signed / "golden" / "output_0.npy", np.zeros(3, np.float32))
    edit_manifest(signed, lambda m: m["files"].update(
        {rel: sha256_file(signed / rel) for rel in ("module.vmfb", "golden/output_0.npy")}))
    load_bundle(signed).verify()      # consistent: every sha256 matches
    with pytest.raises(BundleNotTrusted, match="does not match its signature"):
        verify_bundle(signed)


def test_a_bundle_signed_by_a_key_not_in_allowed_signers_is_refused(signed, tmp_path,
                                                                    monkeypatch):
    # the attacker re-signs the swapped bundle with their own key (their own EDGEKIT_HOME)
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "attacker"))
    (signed / "module.vmfb").write_bytes(b"another model")
    edit_manifest(signed, lambda m: m["files"].update(
        {"module.vmfb": sha256_file(signed / "module.vmfb")}))
    sign_bundle(signed)
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "home"))
    with pytest.raises(BundleNotTrusted, match="signed by a key that is not trusted") as err:
        verify_bundle(signed)
    fingerprint = signer_fingerprint(signed / SIGNATURE)
    assert fingerprint.startswith("key SHA256:") and fingerprint in err.value.what
    assert "allowed_signers" in err.value.hint


def test_the_users_own_key_signs_when_configured(home, tmp_path, monkeypatch):
    import subprocess
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice@example.org",
                    "-f", str(key)], check=True)
    monkeypatch.setenv("EDGEKIT_SIGNING_KEY", str(key))
    directory = tiny_bundle(tmp_path / "b")
    sign_bundle(directory)
    assert verify_bundle(directory) == "alice@example.org"
    assert not (home / "keys").exists()
    monkeypatch.setenv("EDGEKIT_SIGNING_KEY", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="does not exist"):
        sign_bundle(directory)


def test_a_signature_of_another_namespace_is_refused(signed, home):
    import subprocess
    os.remove(signed / SIGNATURE)
    subprocess.run(["ssh-keygen", "-q", "-Y", "sign", "-f", str(home / "keys" / "bundle_ed25519"),
                    "-n", "file", str(signed / MANIFEST)], check=True)
    with pytest.raises(BundleNotTrusted):
        verify_bundle(signed)


def test_a_new_signing_key_is_announced_with_its_fingerprint(home, tmp_path, capfd):
    sign_bundle(tiny_bundle(tmp_path / "b"))
    said = capfd.readouterr().err
    key = home / "keys" / "bundle_ed25519"
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    assert f"created {key} (ssh-ed25519 {fingerprint})" in said, said
    assert said.count("\n") == 1
    sign_bundle(tiny_bundle(tmp_path / "c"))          # said once: the key exists now
    assert capfd.readouterr().err == ""


def test_a_directory_where_the_signing_key_goes_is_a_config_error(home, tmp_path):
    (home / "keys" / "bundle_ed25519").mkdir(parents=True)
    with pytest.raises(ConfigError, match="bundle_ed25519 is not a file"):
        sign_bundle(tiny_bundle(tmp_path / "b"))


def test_the_principal_this_home_signs_as_is_the_one_verification_finds(signed, home):
    # a build that records a tuning note signs the verified manifest again and names this
    # principal without a second verification (toolchain/verified.py)
    from edgekit.toolchain.signing import own_principal
    assert own_principal() == verify_bundle(signed)
    with (home / "allowed_signers").open("a") as f:
        f.write('colleague namespaces="edgekit-bundle" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA\n')
    assert own_principal() == verify_bundle(signed)
