"""Hostile bundles against a real sshd device: a manifest naming ../../../../.profile (the
attack of issue 17, through `edgekit bench --bundle`), a manifest-only tamper, and a release
changed on the device after it was deployed (verify.sh checks the signature there)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.device.deploy import deploy_bundle
from edgekit.device.layout import release_dir, shims_dir
from edgekit.device.provision import shim_version
from edgekit.models.bundle import MANIFEST, load_bundle, sha256_file
from edgekit.transport import open_device

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "kws_mlp.yaml"


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hostile") / "a" / "b" / "c" / "d" / "kws"
    return build(BuildOptions(recipe=RECIPE, target="host", out=out)).bundle.path


def edgekit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *args],
                          capture_output=True, text=True, timeout=600)


def home_listing(device) -> dict[str, bytes]:
    home = device.host_path(device.home)
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*")
            if p.is_file() and not p.is_symlink()}


def test_bench_with_a_bundle_naming_dotprofile_is_refused_before_anything_is_sent(
        fault_device, honest, tmp_path):
    evil = tmp_path / "a" / "b" / "c" / "d" / "evil"
    shutil.copytree(honest, evil)
    profile = tmp_path / "a" / ".profile"
    profile.write_text("touch $HOME/owned\n")
    manifest = json.loads((evil / MANIFEST).read_text())
    manifest["files"]["../../../../.profile"] = sha256_file(profile)
    (evil / MANIFEST).write_text(json.dumps(manifest, indent=2))
    before = home_listing(fault_device)
    proc = edgekit("bench", "run", fault_device.name, "--bundle", str(evil), "--rounds", "1",
                   "--repetitions", "2", "--warmup", "0", "--json")
    assert proc.returncode == 6, proc.stderr
    said = json.loads(proc.stdout)       # under --json the error is the JSON document
    assert said["exit"] == 6 and "'../../../../.profile' is not one a bundle may hold" in \
        said["error"]
    assert "Traceback" not in proc.stderr
    assert home_listing(fault_device) == before


def test_a_manifest_only_tamper_is_refused_with_exit_6(fault_device, honest, tmp_path):
    loose = tmp_path / "loose"
    shutil.copytree(honest, loose)
    manifest = json.loads((loose / MANIFEST).read_text())
    manifest["tolerances"] = {"atol": 1e9, "rtol": 1e9, "min_cosine": -1.0}
    (loose / MANIFEST).write_text(json.dumps(manifest, indent=2))
    before = home_listing(fault_device)
    proc = edgekit("deploy", str(loose), "--host", fault_device.name)
    assert proc.returncode == 6 and "does not match its signature" in proc.stderr
    assert home_listing(fault_device) == before


def test_a_release_changed_on_the_device_fails_verify_there(fault_device, honest):
    bundle = load_bundle(honest)
    with open_device(fault_device.name) as conn:
        # the session's lab device may run a newer kws-mlp (another module's build): the
        # release's age is not what this test is about
        result = deploy_bundle(conn, bundle, allow_downgrade=True)
        remote = release_dir(bundle.manifest.app, result.release)
        verify = ["sh", f"{shims_dir(shim_version())}/verify.sh", remote]
        assert conn.run(verify, check=False).returncode == 0
        home = fault_device.host_path(fault_device.home)
        on_device = home / remote
        manifest = json.loads((on_device / MANIFEST).read_text())
        manifest["tolerances"]["atol"] = 1e9
        (on_device / MANIFEST).write_text(json.dumps(manifest, indent=2))
        sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=on_device,
                              capture_output=True, text=True)
        assert "manifest.json: FAILED" in sums.stdout
        lines = [line if not line.endswith("  manifest.json") else
                 f"{sha256_file(on_device / MANIFEST)}  manifest.json"
                 for line in (on_device / "SHA256SUMS").read_text().splitlines()]
        (on_device / "SHA256SUMS").write_text("\n".join(lines) + "\n")
        checked = conn.run(verify, check=False)
        assert checked.returncode == 1
        assert "does not match its signature" in checked.stderr.decode()
