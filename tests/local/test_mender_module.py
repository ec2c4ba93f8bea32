"""The Mender update module (runtime_shims/mender_edgekit, as `edgekit agent install --mender`
installs it) driven through Update Module v3 states the way mender-client calls them, on a
device that is a directory here: what it answers, the state sequence of an install and of a
failed commit, and the payloads it refuses. (The real mender-client drives it in
tests/device/test_mender.py.)"""

import json
import os
import subprocess
import tarfile

import pytest

from edgekit.api.mender import install_mender_module
from edgekit.channel.payload import write_payload
from edgekit.config.recipe import Hooks
from edgekit.fleet.mender_export import PAYLOAD, pack_payload
from edgekit.models.bundle import MANIFEST
from tests.local.conftest import APP, current_of, device_journal, rehash, releases_on, \
    set_manifest

pytestmark = pytest.mark.local


@pytest.fixture
def module(make_device):
    """(the device's root, a function running the installed module in STATE)."""
    device = make_device()
    installed = install_mender_module(f"local:{device.root}", f"{device.root}/modules")
    assert installed.module == f"{device.root}/modules/edgekit"

    def run(state, files):
        return subprocess.run([installed.module, state, str(files)], capture_output=True,
                              text=True, timeout=300, cwd=files,
                              env={**os.environ, "HOME": "/nonexistent"})
    return device.root, run


def files_dir(tmp_path, bundle, name="tree"):
    """A FILES_DIR as mender-client lays it out for the module (header/, tmp/, files/)."""
    tree = tmp_path / name
    for folder in ("header", "tmp", "files"):
        (tree / folder).mkdir(parents=True)
    payload = write_payload(bundle, tmp_path / f"{name}-payload")
    pack_payload(payload.directory, tree / "files" / PAYLOAD)
    (tree / "header" / "meta-data").write_text(json.dumps(
        {"app": APP, "edgekit": 1, "release": payload.release}, indent=2))
    return tree, payload.release


def install(run, tree, states=("Download", "ArtifactInstall", "ArtifactCommit", "Cleanup")):
    for state in states:
        done = run(state, tree)
        if done.returncode:
            return state, done
    return None, done


def test_the_module_answers_mender_queries_and_ignores_states_it_does_not_know(module,
                                                                              tmp_path):
    root, run = module
    text = (root / "modules" / "edgekit").read_text()
    assert text.startswith("#!/bin/sh\n") and "python" not in text and "@SHIMS@" not in text
    assert subprocess.run(["sh", "-n", str(root / "modules" / "edgekit")]).returncode == 0
    assert run("SupportsRollback", tmp_path).stdout == "Yes\n"
    assert run("NeedsArtifactReboot", tmp_path).stdout == "No\n"
    assert run("ArtifactVerifyReboot", tmp_path).returncode == 0
    assert run("SomeStateOfALaterProtocol", tmp_path).returncode == 0


def test_install_validates_without_switching_and_commit_switches(module, v1, tmp_path):
    root, run = module
    tree, release = files_dir(tmp_path, v1)
    assert install(run, tree, ("Download", "ArtifactInstall"))[0] is None
    assert current_of(root) is None and device_journal(root) == [("validated", release)]
    failed, done = install(run, tree, ("ArtifactCommit", "Cleanup"))
    assert failed is None, done.stderr
    assert current_of(root) == release
    assert device_journal(root)[-1] == ("activate", release)
    assert not (tree / "tmp" / "edgekit-bundle").exists()     # Cleanup


def test_after_a_failed_health_hook_mender_s_rollback_leaves_the_restored_release(
        module, v1, v2, bundle_copy, tmp_path):
    """install_bundle.sh has put the previous release back when the commit fails; the
    ArtifactRollback that mender-client calls next must not undo anything more."""
    root, run = module
    first, one = files_dir(tmp_path, v1, "one")
    assert install(run, first)[0] is None

    def hooked(directory):
        manifest = json.loads((directory / MANIFEST).read_text())
        manifest["hooks"] = Hooks(health="exit 3", timeout_s=20).model_dump(mode="json")
        (directory / MANIFEST).write_text(json.dumps(manifest))
        rehash(directory, "module.vmfb")
    second, two = files_dir(tmp_path, bundle_copy(v2, hooked), "two")
    failed, done = install(run, second)
    assert failed == "ArtifactCommit" and "health hook exited with 3" in done.stderr
    assert current_of(root) == one
    for state in ("ArtifactRollback", "ArtifactFailure", "Cleanup"):
        assert run(state, second).returncode == 0
    assert current_of(root) == one
    assert device_journal(root)[-3:] == [("health-failed", two), ("activate", one),
                                         ("rollback", one)]


@pytest.mark.parametrize("entry", ["symlink", "outside"])
def test_a_payload_with_an_entry_edgekit_does_not_write_is_refused_before_unpacking(
        module, v1, tmp_path, entry):
    root, run = module
    tree, _ = files_dir(tmp_path, v1)
    with tarfile.open(tree / "files" / PAYLOAD, "a") as tar:
        info = tarfile.TarInfo("release/golden" if entry == "symlink" else "escape.sh")
        if entry == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(info, None if entry == "symlink" else open(os.devnull, "rb"))
    failed, done = install(run, tree)
    assert failed == "ArtifactInstall"
    assert "an entry edgekit does not write" in done.stderr
    assert not (tree / "tmp" / "edgekit-bundle").exists()
    assert releases_on(root) == set() and current_of(root) is None


def test_mender_rollback_before_the_commit_leaves_no_staged_release(module, v1, v2, tmp_path):
    root, run = module
    first, one = files_dir(tmp_path, v1, "one")
    assert install(run, first)[0] is None
    second, two = files_dir(tmp_path, v2, "two")
    assert install(run, second, ("Download", "ArtifactInstall"))[0] is None
    assert releases_on(root) == {one, two}
    # `mender rollback`: ArtifactRollback, ArtifactFailure, Cleanup
    assert install(run, second, ("ArtifactRollback", "ArtifactFailure", "Cleanup"))[0] is None
    assert current_of(root) == one and releases_on(root) == {one}
    assert not (root / ".edgekit" / "apps" / APP / f".plan-{two}").exists()


def test_committed_releases_are_pruned_to_current_the_rollback_target_and_three(
        module, v1, bundle_copy, tmp_path):
    root, run = module
    releases = []
    for n in range(5):
        bundle = bundle_copy(v1, lambda d, n=n: set_manifest(d, model_notes=[f"build {n}"]))
        tree, release = files_dir(tmp_path, bundle, f"r{n}")
        assert install(run, tree)[0] is None
        releases.append(release)
    assert current_of(root) == releases[-1]
    assert releases_on(root) == set(releases[-3:])
