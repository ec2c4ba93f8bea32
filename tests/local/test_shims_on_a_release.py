"""The device-side shims on a real release: run.sh and bench.sh drive the real IREE runtime
tools on the session's host bundle, and verify.sh checks its signature and sums against
tampering (the shims' plain-file checks: tests/shims/test_shims.py)."""

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgekit.device.deploy import release_extras
from edgekit.models.bundle import load_bundle
from edgekit.toolchain.iree import tool_path
from edgekit.toolchain.signing import trusted_signers
from tests.shims.test_shims import sh

pytestmark = pytest.mark.local

# one call per repetition, as edgekit's own benches pass it (device/bench.py): the default
# (each repetition runs for 0.5 s) made each bench.sh here 1.6 s of CPU for nothing tested
ONE_CALL = "--benchmark_min_time=1x"


@pytest.fixture(scope="module")
def host_release(builds, tmp_path_factory):
    """The session's host bundle laid out as a release (a copy: run.env, signature and
    SHA256SUMS are added to it), with the real runtime tools beside it."""
    root = tmp_path_factory.mktemp("device")
    shutil.copytree(builds["v1"], root / "bundle")
    bundle = load_bundle(root / "bundle")
    runtime = root / "runtime" / "bin"
    runtime.mkdir(parents=True)
    for tool in ("iree-run-module", "iree-benchmark-module"):
        (runtime / tool).symlink_to(tool_path(tool))
    for extra in release_extras(bundle, root / "bundle"):
        assert extra.parent == root / "bundle"
    (root / ".edgekit").mkdir()   # the device user's home is `root`: it trusts our key
    shutil.copyfile(trusted_signers(), root / ".edgekit" / "allowed_signers")
    return bundle, runtime.parent


def test_run_writes_the_outputs_of_the_golden_inputs(host_release, tmp_path):
    bundle, runtime = host_release
    assert sh("verify.sh", bundle.path, home=runtime.parent).returncode == 0
    proc = sh("run.sh", runtime, bundle.path, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out" / "output_0.npy")
    np.testing.assert_allclose(got, np.load(bundle.file("golden/output_0.npy")), atol=1e-5)


def test_run_runs_each_validation_sample_and_refuses_a_bad_sample_number(host_release,
                                                                         tmp_path):
    bundle, runtime = host_release
    assert bundle.manifest.more_golden
    for k, sample in enumerate(bundle.manifest.more_golden, 1):
        proc = sh("run.sh", runtime, bundle.path, tmp_path / f"out{k}", str(k))
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(np.load(tmp_path / f"out{k}" / "output_0.npy"),
                                   np.load(bundle.file(sample.outputs[0])), atol=1e-5)
    for bad in ("1;reboot", "9"):
        proc = sh("run.sh", runtime, bundle.path, tmp_path / "bad", bad)
        assert proc.returncode != 0 and not (tmp_path / "bad").exists(), proc.stderr


def test_bench_prints_benchmark_json(host_release):
    bundle, runtime = host_release
    proc = sh("bench.sh", runtime, bundle.path, "--benchmark_repetitions=2", ONE_CALL)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert any("real_time" in b for b in report["benchmarks"])


def test_run_and_bench_use_the_releases_tuned_worker_count(host_release, tmp_path):
    """A release tuned for 2 local-task workers (run.env THREADS) runs them in validation
    (run.sh) and benchmarks (bench.sh), where the host's own count, passed later, wins. The
    real tools run, behind a wrapper that records their command line."""
    bundle, runtime = host_release
    copy = tmp_path / "release"
    shutil.copytree(bundle.path, copy)
    env = (copy / "run.env").read_text().replace("DRIVER=local-sync", "DRIVER=local-task")
    (copy / "run.env").write_text(env.replace("DRIVER=local-task\n",
                                              "DRIVER=local-task\nTHREADS=2\n"))
    logged = tmp_path / "runtime" / "bin"
    logged.mkdir(parents=True)
    for tool in ("iree-run-module", "iree-benchmark-module"):
        (logged / tool).write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/argv\n'
                                   f'exec {runtime}/bin/{tool} "$@"\n')
        (logged / tool).chmod(0o755)
    assert sh("run.sh", logged.parent, copy, tmp_path / "out").returncode == 0
    assert sh("bench.sh", logged.parent, copy, "--benchmark_repetitions=2",
              ONE_CALL).returncode == 0
    assert sh("bench.sh", logged.parent, copy, "--benchmark_repetitions=2", ONE_CALL,
              "--task_topology_group_count=1").returncode == 0
    run, bench, bench_one = (tmp_path / "argv").read_text().splitlines()
    assert "--device=local-task" in run and "--task_topology_group_count=2" in run
    assert "--task_topology_group_count=2" in bench
    assert bench_one.index("--task_topology_group_count=1") > \
        bench_one.index("--task_topology_group_count=2")     # IREE takes the last


@pytest.fixture
def release(host_release, tmp_path):
    """A copy of the host release (with its SHA256SUMS, run.env and signature) to tamper
    with, and the device home that trusts the session's key."""
    bundle, runtime = host_release
    copy = tmp_path / "release"
    shutil.copytree(bundle.path, copy)
    return copy, runtime.parent


def resum(release: Path) -> None:
    """SHA256SUMS over every file, as an attacker who can write the release would leave it."""
    names = sorted(str(p.relative_to(release)) for p in release.rglob("*")
                   if p.is_file() and not p.is_symlink() and p.name != "SHA256SUMS")
    sums = subprocess.run(["sha256sum", *names], cwd=release, capture_output=True, text=True,
                          check=True).stdout
    (release / "SHA256SUMS").write_text(sums)


def refused(release: Path, home: Path, *flags: str) -> str:
    proc = sh("verify.sh", release, *flags, home=home)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_verify_accepts_a_signed_release_as_deployed(release):
    path, home = release
    assert sh("verify.sh", path, home=home).returncode == 0


def test_verify_refuses_a_manifest_changed_after_signing_even_with_fresh_sums(release):
    path, home = release
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tolerances"]["atol"] = 1e9
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
    resum(path)
    assert "does not match its signature" in refused(path, home)


def test_verify_refuses_a_module_swapped_with_matching_sums(release):
    path, home = release
    (path / "module.vmfb").write_bytes(b"another model")
    resum(path)
    assert "does not match the signed manifest" in refused(path, home)


def test_verify_with_the_controllers_sums_checks_them_instead_of_the_signature(release):
    path, home = release
    sums = hashlib.sha256((path / "SHA256SUMS").read_bytes()).hexdigest()
    assert sh("verify.sh", path, "--expect-sums", f"{'1' * 64},{sums}",
              home=home).returncode == 0
    assert "not one the controller wrote" in refused(path, home, "--expect-sums", "0" * 64)
    # every file is still checked against those sums
    (path / "module.vmfb").write_bytes(b"another model")
    assert "sha256 mismatch" in refused(path, home, "--expect-sums", sums)
    # sums rewritten to match: no longer the controller's
    resum(path)
    assert "not one the controller wrote" in refused(path, home, "--expect-sums", sums)
    for bad in ("", ",", "xyz", f"{sums},,{sums}"):
        assert sh("verify.sh", path, "--expect-sums", bad, home=home).returncode == 2


def test_verify_refuses_a_release_signed_by_an_untrusted_key(release, tmp_path):
    path, home = release
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / ".edgekit").mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)
    public = (tmp_path / "k.pub").read_text().split()
    (stranger / ".edgekit" / "allowed_signers").write_text(
        f'someone namespaces="edgekit-bundle" {public[0]} {public[1]}\n')
    assert "not in" in refused(path, stranger)
    (path / "manifest.json.sig").unlink()
    resum(path)
    assert "not signed" in refused(path, home)
    assert sh("verify.sh", path, "--allow-unsigned", home=home).returncode == 0


@pytest.mark.parametrize("attack", ["symlink to a file", "symlinked golden", "escaping name",
                                    "extra file", "listed outside"])
def test_verify_refuses_what_a_release_may_not_hold(release, tmp_path, attack):
    path, home = release
    if attack == "symlink to a file":
        target = tmp_path / "elsewhere.npy"
        (path / "golden" / "output_0.npy").rename(target)
        (path / "golden" / "output_0.npy").symlink_to(target)
        expected = "golden/output_0.npy is a symlink"
    elif attack == "symlinked golden":
        (path / "golden").rename(tmp_path / "golden")
        (path / "golden").symlink_to(tmp_path / "golden")
        expected = "golden is a symlink"
    elif attack == "escaping name":
        (path / "golden" / "..evil.npy").write_text("x")
        resum(path)
        expected = "unexpected file name"
    elif attack == "extra file":
        (path / ".profile").write_text("evil")
        expected = "unexpected file name: .profile"
    else:
        (tmp_path / "outside").write_text("x")
        with (path / "SHA256SUMS").open("a") as f:
            f.write(f"{'0' * 64}  ../outside\n")
        expected = "SHA256SUMS lists an unexpected file name: ../outside"
    for flags in ((), ("--allow-unsigned",)):
        assert expected in refused(path, home, *flags)


def test_verify_follows_an_apps_current_link_but_no_other_release_symlink(release, tmp_path):
    path, home = release
    app = tmp_path / "app"
    (app / "releases").mkdir(parents=True)
    path.rename(app / "releases" / "r1")
    (app / "current").symlink_to("releases/r1")
    assert sh("verify.sh", app / "current", home=home).returncode == 0
    (app / "releases" / "r2").symlink_to(app / "releases" / "r1")
    assert "is a symlink" in refused(app / "releases" / "r2", home)
    (app / "current").unlink()
    (app / "current").symlink_to(tmp_path)
    assert "is a symlink" in refused(app / "current", home)
