"""A bundle holds a closed set of plain files: manifest names outside it, symlinks in a bundle
directory and links or devices in a bundle archive are refused in one line, before anything
is read from or written outside the bundle."""

import json
import os
import tarfile
import tempfile

import numpy as np
import pytest

from edgekit.config.recipe import Validation
from edgekit.errors import BundleError
from edgekit.models.bundle import (MANIFEST, LoweringRecord, Manifest, load_bundle, sha256_file,
                                   write_manifest, write_tar)


def tiny_bundle(directory):
    """A bundle directory with a fake module and one golden input and output (no compiler)."""
    (directory / "golden").mkdir(parents=True)
    (directory / "module.vmfb").write_bytes(b"not really a module")
    np.save(directory / "golden" / "input_0.npy", np.ones(3, np.float32))
    np.save(directory / "golden" / "output_0.npy", np.arange(3, dtype=np.float32))
    files = {rel: sha256_file(directory / rel)
             for rel in ("module.vmfb", "golden/input_0.npy", "golden/output_0.npy")}
    write_manifest(directory, Manifest(
        app="tiny", created_at="", model_source="", model_digest="", recipe_digest="",
        target="host", target_profile={}, backend="llvm-cpu", arch="x86_64",
        runtime_driver="local-task", compiler_version="0", compile_flags=(), inputs=(),
        outputs=(), golden_inputs=("golden/input_0.npy",),
        golden_outputs=("golden/output_0.npy",), tolerances=Validation(),
        lowering=LoweringRecord(requested="auto", used="tosa", attempts=()), toolchain={},
        files=files))
    return directory


def add_to_manifest(directory, name: str, digest: str = "0" * 64) -> None:
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"][name] = digest
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))


def one_line(exc: BaseException) -> str:
    head = str(exc).split("\n  hint:")[0]
    assert "\n" not in head and "Traceback" not in str(exc)
    return head


def test_a_bundle_as_built_loads(tmp_path):
    bundle = load_bundle(tiny_bundle(tmp_path / "b"))
    bundle.verify()
    assert set(bundle.manifest.files) == {"module.vmfb", "golden/input_0.npy",
                                          "golden/output_0.npy"}


@pytest.mark.parametrize("name", ["../../../../.profile", "/etc/passwd", "golden/../../x.npy",
                                  "golden/sub/x.npy", "golden/.x.npy", "golden/x.sh",
                                  "run.env", "SHA256SUMS", "module.vmfb/../x", "golden/x y.npy"])
def test_a_manifest_naming_a_file_outside_the_closed_set_is_refused(tmp_path, name):
    directory = tiny_bundle(tmp_path / "b")
    add_to_manifest(directory, name)
    with pytest.raises(BundleError, match="is not one a bundle may hold") as err:
        load_bundle(directory)
    assert repr(name) in one_line(err.value)


def test_a_golden_file_the_manifest_does_not_list_is_refused(tmp_path):
    directory = tiny_bundle(tmp_path / "b")
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["golden_inputs"] = ["../../.profile"]
    (directory / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="not in files"):
        load_bundle(directory)


def test_a_symlink_inside_a_bundle_directory_is_refused_not_followed(tmp_path):
    directory = tiny_bundle(tmp_path / "b")
    secret = tmp_path / "secret.npy"
    secret.write_bytes((directory / "golden" / "output_0.npy").read_bytes())
    (directory / "golden" / "output_0.npy").unlink()
    (directory / "golden" / "output_0.npy").symlink_to(secret)
    with pytest.raises(BundleError, match="golden/output_0.npy is a symlink") as err:
        load_bundle(directory)
    one_line(err.value)


def test_a_symlinked_golden_folder_or_manifest_is_refused(tmp_path):
    directory = tiny_bundle(tmp_path / "b")
    (directory / "golden").rename(tmp_path / "elsewhere")
    (directory / "golden").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BundleError, match="golden is a symlink"):
        load_bundle(directory)
    other = tiny_bundle(tmp_path / "c")
    (other / MANIFEST).rename(tmp_path / "manifest.json")
    (other / MANIFEST).symlink_to(tmp_path / "manifest.json")
    with pytest.raises(BundleError, match="manifest.json is a symlink"):
        load_bundle(other)


@pytest.fixture
def scratch_root(tmp_path, monkeypatch):
    """Where tempfile creates directories during the test: a folder of its own, to count."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_a_bundle_archive_written_by_edgekit_loads_and_its_extraction_goes_with_it(
        tmp_path, scratch_root):
    archive = write_tar(tiny_bundle(tmp_path / "b"), tmp_path / "b.tar")
    with load_bundle(archive) as bundle:
        bundle.verify()
        assert bundle.manifest.app == "tiny"
        assert bundle.path.is_relative_to(scratch_root) and bundle.module.is_file()
    assert list(scratch_root.iterdir()) == []
    opened = load_bundle(archive)
    opened.release()
    assert list(scratch_root.iterdir()) == []


def test_a_bundle_directory_is_not_removed_when_released(tmp_path):
    with load_bundle(tiny_bundle(tmp_path / "b")) as bundle:
        pass
    bundle.release()
    assert bundle.module.is_file()


def test_an_archive_refused_after_extraction_leaves_nothing_behind(tmp_path, scratch_root):
    directory = tiny_bundle(tmp_path / "b")
    (directory / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError, match="malformed"):
        load_bundle(write_tar(directory, tmp_path / "b.tar"))
    assert list(scratch_root.iterdir()) == []


def archive_with(tmp_path, extra: tarfile.TarInfo, data: bytes = b""):
    """The tiny bundle as b/… in a tar, plus one hostile member."""
    import io
    directory = tiny_bundle(tmp_path / "b")
    archive = tmp_path / "hostile.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(directory, arcname="b")
        tar.addfile(extra, io.BytesIO(data) if data else None)
    return archive


def member(name: str, kind=tarfile.REGTYPE, linkname: str = "", size: int = 0):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, linkname, size
    return info


@pytest.mark.parametrize("hostile, message", [
    (member("b/golden/evil.npy", tarfile.SYMTYPE, "/etc/passwd"), "holds a symlink"),
    (member("b/golden/evil.npy", tarfile.SYMTYPE, "../../../.profile"), "holds a symlink"),
    (member("b/golden/hard.npy", tarfile.LNKTYPE, "b/module.vmfb"), "holds a hard link"),
    (member("b/golden/pipe.npy", tarfile.FIFOTYPE), "holds a device or fifo"),
    (member("b/golden/null.npy", tarfile.CHRTYPE), "holds a device or fifo"),
])
def test_a_bundle_archive_with_a_link_or_device_is_refused_in_one_line(tmp_path, hostile,
                                                                        message):
    with pytest.raises(BundleError, match=message) as err:
        load_bundle(archive_with(tmp_path, hostile))
    one_line(err.value)


@pytest.mark.parametrize("name", ["b/../../.profile", "/tmp/evil", "b/run.env",
                                  "b/golden/sub/x.npy", "b/.ssh/authorized_keys"])
def test_a_bundle_archive_with_another_name_is_refused_before_extraction(tmp_path, name):
    archive = archive_with(tmp_path, member(name, size=4), b"evil")
    with pytest.raises(BundleError, match="not a file a bundle may hold|not a plain name") \
            as err:
        load_bundle(archive)
    one_line(err.value)
    assert not (tmp_path / ".profile").exists() and not os.path.exists("/tmp/evil")


def test_an_archive_that_is_cut_short_is_a_bundle_error(tmp_path):
    archive = write_tar(tiny_bundle(tmp_path / "b"), tmp_path / "b.tar")
    archive.write_bytes(archive.read_bytes()[:3000])
    with pytest.raises(BundleError) as err:
        load_bundle(archive)
    one_line(err.value)
