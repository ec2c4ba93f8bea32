"""Signed bundles and containment on the release paths: deploy, `bench --bundle` and the build
cache refuse what their signer did not build, before anything reaches the device; the device
gets the trusted signers and checks again."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.config.paths import cache_root
from edgekit.device.deploy import deploy_bundle, release_id
from edgekit.errors import BundleError, BundleNotTrusted
from edgekit.models.bundle import MANIFEST, SIGNATURE, sha256_file
from edgekit.toolchain.signing import trusted_signers
from tests.fixtures.cli import edgekit_here
from tests.local.conftest import RECIPE, current_of, device_journal, set_manifest

pytestmark = pytest.mark.local


def edgekit(*args: str) -> subprocess.CompletedProcess:
    return edgekit_here(*args)


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_deploy_gives_the_device_the_trusted_signers_and_the_signature(make_device, v1):
    device = make_device()
    result = deploy_bundle(device, v1)
    assert result.signer and result.signer in trusted_signers().read_text()
    assert (device.root / ".edgekit" / "allowed_signers").read_text() == \
        trusted_signers().read_text()
    release = device.root / ".edgekit" / "apps" / v1.manifest.app / "releases" / result.release
    assert (release / SIGNATURE).read_bytes() == v1.file(SIGNATURE).read_bytes()


def test_an_unsigned_bundle_is_refused_before_anything_reaches_the_device(make_device, v1,
                                                                         bundle_copy):
    device = make_device()
    unsigned = bundle_copy(v1, lambda d: (d / SIGNATURE).unlink())
    with pytest.raises(BundleNotTrusted, match="not signed"):
        deploy_bundle(device, unsigned)
    assert not any(device.root.iterdir())


def test_allow_unsigned_deploys_it_and_the_device_journal_says_so(make_device, v1,
                                                                 bundle_copy):
    device = make_device()
    unsigned = bundle_copy(v1, lambda d: (d / SIGNATURE).unlink())
    result = deploy_bundle(device, unsigned, allow_unsigned=True)
    assert result.signer is None and current_of(device.root) == result.release
    assert device_journal(device.root)[0] == ("unsigned-allowed", result.release)
    # a signed bundle with the opt-out given is checked all the same, and not journaled
    signed = deploy_bundle(make_device("other"), v1, allow_unsigned=True)
    assert signed.signer and ("unsigned-allowed", signed.release) not in \
        device_journal(device.root.parent / "other")


def test_a_manifest_only_tamper_is_refused_and_would_be_another_release(make_device, v1,
                                                                       bundle_copy):
    device = make_device()
    loose = bundle_copy(v1, lambda d: set_manifest(
        d, sign=False, tolerances={"atol": 1e9, "rtol": 1e9, "min_cosine": -1.0}))
    assert release_id(loose) != release_id(v1)
    with pytest.raises(BundleNotTrusted, match="does not match its signature"):
        deploy_bundle(device, loose)
    assert not any(device.root.iterdir())


def escaping_bundle(v1, tmp_path) -> Path:
    """The attack of issue 17: a manifest whose `files` names ../../../../.profile (the file
    exists there, relative to the bundle, with the sha256 the manifest records)."""
    bundle = tmp_path / "a" / "b" / "c" / "d" / "evil"
    shutil.copytree(v1.path, bundle)
    profile = tmp_path / "a" / ".profile"
    profile.write_text("echo owned > /tmp/owned\n")
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["files"]["../../../../.profile"] = sha256_file(profile)
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return bundle


@pytest.mark.parametrize("command", ["bench", "deploy"])
def test_a_bundle_naming_a_file_outside_itself_is_refused_before_anything_is_uploaded(
        v1, tmp_path, command):
    bundle = escaping_bundle(v1, tmp_path)
    device = tmp_path / "device"
    device.mkdir()
    argv = ["bench", "run", f"local:{device}", "--bundle", str(bundle), "--rounds", "1",
            "--repetitions", "2", "--warmup", "0", "--json"] if command == "bench" else \
        ["deploy", str(bundle), "--host", f"local:{device}"]
    proc = edgekit(*argv)
    assert proc.returncode == 6
    # under --json (bench's argv) the error is the JSON document on stdout
    said = json.loads(proc.stdout)["error"] if "--json" in argv else error_line(proc)
    assert "'../../../../.profile' is not one a bundle may hold" in said
    assert not any(device.iterdir())   # no ~/.profile, no ~/.edgekit: nothing was sent


def test_the_opt_out_is_a_cli_flag_and_an_unsigned_bundle_exits_6(v1, tmp_path):
    unsigned = tmp_path / "unsigned"
    shutil.copytree(v1.path, unsigned)
    (unsigned / SIGNATURE).unlink()
    device = tmp_path / "device"
    device.mkdir()
    proc = edgekit("deploy", str(unsigned), "--host", f"local:{device}")
    assert proc.returncode == 6 and "is not signed" in error_line(proc)
    assert not any(device.iterdir())
    proc = edgekit("deploy", str(unsigned), "--host", f"local:{device}", "--allow-unsigned",
                   "--json")
    assert proc.returncode == 0, proc.stderr
    assert device_journal(device)[0][0] == "unsigned-allowed"


@pytest.fixture
def private_cache(builds, tmp_path, monkeypatch):
    """A copy of the session's build cache (so tampering with it spares the other tests)."""
    copy = tmp_path / "cache"
    shutil.copytree(cache_root(), copy, symlinks=True)
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(copy))
    return copy / "builds"


def entry_of(cache: Path, bundle_dir: Path) -> Path:
    """The cache entry of this very build (its build key: the same recipe built with other
    options by an earlier test in this worker is another entry)."""
    key = json.loads((bundle_dir / MANIFEST).read_text())["build_key"]
    return next(e for e in cache.iterdir() if (e / MANIFEST).is_file() and
                json.loads((e / MANIFEST).read_text())["build_key"] == key)


@pytest.mark.parametrize("swap", ["module, goldens and a re-hashed manifest",
                                  "the whole entry, signature included"])
def test_a_cache_entry_swapped_for_another_model_is_refused_at_build(builds, private_cache,
                                                                    tmp_path, swap):
    honest, other = entry_of(private_cache, builds["v1"]), entry_of(private_cache, builds["v2"])
    names = ["module.vmfb", "golden", MANIFEST] + ([SIGNATURE] if "whole" in swap else [])
    for name in names:
        target = honest / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        (shutil.copytree if (other / name).is_dir() else shutil.copyfile)(other / name, target)
    with pytest.raises(BundleError, match="the cached build is not what was built") as err:
        build(BuildOptions(recipe=RECIPE, target="host", out=tmp_path / "out"))
    assert err.value.exit_code == 6 and "--no-cache" in err.value.hint
    rebuilt = build(BuildOptions(recipe=RECIPE, target="host", out=tmp_path / "out",
                                 use_cache=False)).bundle
    assert rebuilt.manifest.files == json.loads((builds["v1"] / MANIFEST).read_text())["files"]
