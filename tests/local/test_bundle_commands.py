"""`edgekit bundle inspect|verify` on real built bundles, as directories and as .tar files: the
summary a user reads, and each way a bundle can be bad answered with exit 6 in one line."""

import json
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from edgekit.api.bundle import inspect, verify
from edgekit.cli.main import cli
from edgekit.device.deploy import release_id
from edgekit.errors import BundleError, BundleNotTrusted
from edgekit.models.bundle import SIGNATURE, write_tar
from tests.local.conftest import rehash, set_manifest

pytestmark = pytest.mark.local


def run(*argv):
    result = CliRunner().invoke(cli, list(argv))
    return result.exit_code, result.stdout, result.stderr


def test_inspect_summarises_a_bundle_directory_and_its_tar_alike(v1, tmp_path):
    tar = write_tar(v1.path, tmp_path / "v1.tar")
    from_dir, from_tar = inspect(v1.path), inspect(tar)
    assert from_dir.app == "kws-mlp" and from_dir.target == "host"
    assert from_dir.model_source == v1.manifest.model_source
    assert from_dir.release == release_id(v1) == from_tar.release
    assert {f.path: f.bytes for f in from_dir.files} == \
        {rel: (v1.path / rel).stat().st_size for rel in v1.manifest.files}
    assert from_dir.validation_samples == 1 + len(v1.manifest.more_golden)
    assert from_dir.signer and from_dir.signature == f"trusted ({from_dir.signer})"
    assert from_dir.toolchain["iree-base-compiler"] == v1.manifest.compiler_version
    assert from_tar.files == from_dir.files and from_tar.signer == from_dir.signer
    code, out, _ = run("bundle", "inspect", str(tar), "--json")
    assert code == 0 and json.loads(out)["release"] == release_id(v1)
    code, out, _ = run("bundle", "inspect", str(v1.path))
    assert code == 0 and "module.vmfb" in out and from_dir.signer in out


def test_an_unsigned_bundle_is_inspected_and_says_so(v1, tmp_path):
    unsigned = tmp_path / "unsigned"
    shutil.copytree(v1.path, unsigned)
    (unsigned / SIGNATURE).unlink()
    summary = inspect(unsigned)
    assert summary.signer is None and not summary.signed
    assert "not signed" in summary.signature


def test_verify_passes_a_built_bundle_directory_and_tar(v1, tmp_path):
    verdict = verify(write_tar(v1.path, tmp_path / "v1.tar"))
    assert verdict.release == release_id(v1) and verdict.files == len(v1.manifest.files)
    code, out, _ = run("bundle", "verify", str(v1.path), "--json")
    assert code == 0 and json.loads(out)["ok"] and json.loads(out)["signer"] == verdict.signer


def _changed_golden(d):
    golden = d / "golden" / "output_0.npy"
    np.save(golden, np.load(golden) + 1.0)


def _stray_file(d):
    (d / "golden" / "extra.npy").write_bytes(b"x")


def _symlinked_module(d):
    (d / "module.vmfb").rename(d / "elsewhere")
    os.symlink(d / "elsewhere", d / "module.vmfb")


BROKEN = {
    "a golden changed after the build": (_changed_golden, BundleError,
                                         "does not match its sha256: golden/output_0.npy"),
    "no signature": (lambda d: (d / SIGNATURE).unlink(), BundleNotTrusted, "is not signed"),
    "a manifest edited after signing": (lambda d: set_manifest(d, sign=False, app="other"),
                                        BundleNotTrusted, "does not match its signature"),
    "a file the manifest does not list": (_stray_file, BundleError,
                                          "does not list: golden/extra.npy"),
    "a symlink": (_symlinked_module, BundleError, "module.vmfb is a symlink"),
    "a rehashed golden signed by no one": (
        lambda d: (_changed_golden(d), rehash(d, "golden/output_0.npy", sign=False)),
        BundleNotTrusted, "does not match its signature"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_verify_refuses_a_broken_bundle_in_one_line_with_exit_6(v1, tmp_path, case):
    change, error, words = BROKEN[case]
    broken = tmp_path / "broken"
    shutil.copytree(v1.path, broken, symlinks=True)
    change(broken)
    with pytest.raises(error, match=words):
        verify(broken)
    if case != "a symlink":     # (an archive holding a link is refused as it is read)
        with pytest.raises(error, match=words) as packed:     # the same, as a .tar
            verify(write_tar(broken, tmp_path / "broken.tar"))
        assert packed.value.where.startswith(str(tmp_path / "broken.tar"))
    code, _, err = run("bundle", "verify", str(broken))
    lines = err.strip().splitlines()
    assert code == 6 and lines[0].startswith("error: ") and words in lines[0]
    assert all(line.startswith("  hint: ") for line in lines[1:]) and len(lines) <= 2


def test_verify_of_a_missing_path_names_the_build_command(tmp_path):
    code, _, err = run("bundle", "verify", str(tmp_path / "nothing.tar"))
    assert code == 6 and "no such bundle" in err and "edgekit build" in err
