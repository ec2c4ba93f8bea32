"""`edgekit export mender`'s pure parts: mender-artifact's command line, the keys it can sign
with (refused here in one line, before the tool's x509 error), the device types, and the
payload tar the update module accepts."""

import subprocess
import tarfile

import pytest

from edgekit.errors import ConfigError
from edgekit.fleet.mender_export import (PAYLOAD_TYPE, artifact_argv, check_device_types,
                                         check_key, pack_payload)

pytestmark = pytest.mark.unit


def test_the_artifact_is_an_edgekit_module_image_signed_with_the_key_for_every_device_type(
        tmp_path):
    argv = artifact_argv(tmp_path / "p.tar", tmp_path / "meta.json", tmp_path / "a.mender",
                         "app-0123", "app", "0123", ("rpi4", "imx93"), tmp_path / "k.pem")
    assert argv[:3] == ["mender-artifact", "write", "module-image"]
    pairs = dict(zip(argv[3::2], argv[4::2]))
    assert argv[argv.index("--type") + 1] == PAYLOAD_TYPE == "edgekit"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device-type"] == ["rpi4",
                                                                                 "imx93"]
    assert pairs["--key"] == str(tmp_path / "k.pem")
    assert pairs["--software-name"] == "app" and pairs["--software-version"] == "0123"
    assert pairs["--meta-data"] == str(tmp_path / "meta.json")


@pytest.mark.parametrize("make, found", [
    (["openssl", "genpkey", "-algorithm", "ed25519"], "BEGIN PRIVATE KEY"),
    (["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
     "BEGIN PRIVATE KEY"),
])
def test_a_key_mender_artifact_cannot_read_is_refused_with_the_command_that_makes_one(
        tmp_path, make, found):
    key = tmp_path / "key.pem"
    subprocess.run([*make, "-out", key], check=True, capture_output=True)
    with pytest.raises(ConfigError) as err:
        check_key(key)
    assert found in str(err.value) and "openssl genrsa -traditional" in err.value.hint
    assert err.value.exit_code == 2 and "\n" not in err.value.what


def test_an_ssh_key_or_a_missing_file_is_no_signing_key(tmp_path):
    ssh = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", ssh], check=True)
    with pytest.raises(ConfigError, match="OPENSSH PRIVATE KEY"):
        check_key(ssh)
    with pytest.raises(ConfigError, match="cannot read the signing key"):
        check_key(tmp_path / "absent.pem")


@pytest.mark.parametrize("make", [["openssl", "genrsa", "-traditional", "-out", "K", "2048"],
                                  ["openssl", "ecparam", "-genkey", "-name", "prime256v1",
                                   "-noout", "-out", "K"]])
def test_pkcs1_rsa_and_sec1_ecdsa_keys_are_accepted(tmp_path, make):
    key = tmp_path / "key.pem"
    subprocess.run([key if a == "K" else a for a in make], check=True, capture_output=True)
    assert check_key(key) == key


def test_device_types_are_required_plain_and_kept_once_in_order():
    assert check_device_types(("rpi4", "imx93", "rpi4")) == ("rpi4", "imx93")
    with pytest.raises(ConfigError, match="at least one --device-type"):
        check_device_types(())
    with pytest.raises(ConfigError, match="not a device type"):
        check_device_types(("rpi4;reboot",))


def test_the_payload_tar_holds_plain_files_under_release_and_is_reproducible(tmp_path):
    payload = tmp_path / "payload"
    (payload / "golden").mkdir(parents=True)
    (payload / "manifest.json").write_text("{}")
    (payload / "golden" / "input_0.npy").write_bytes(b"\x93NUMPY")
    first, second = tmp_path / "1.tar", tmp_path / "2.tar"
    pack_payload(payload, first)
    (payload / "manifest.json").touch()      # a newer mtime changes nothing
    pack_payload(payload, second)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["release/golden/input_0.npy", "release/manifest.json"]
    assert all(m.isfile() and m.mode == 0o644 and m.uid == 0 for m in members)


def test_a_symlink_in_the_payload_is_refused(tmp_path):
    payload = tmp_path / "payload"
    payload.mkdir()
    (payload / "module.vmfb").symlink_to("/etc/passwd")
    with pytest.raises(ConfigError, match="not a plain file"):
        pack_payload(payload, tmp_path / "p.tar")
