"""Bundle archives checked before they are expanded: the members' sizes (from their headers)
are summed against a cap and against what a compiled module can compress to, so a bomb is
refused before a byte of it is written (issue 36, item 6)."""

import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from edgekit.errors import BundleError
from edgekit.models.bundle import load_bundle

REPO = Path(__file__).resolve().parents[3]


def header_only(path: Path, name: str, size: int, compress: bool = False) -> Path:
    """An archive whose one member's header claims `size` bytes (the data never follows)."""
    data = tarfile.TarInfo(name)
    data.size = size
    raw = data.tobuf(format=tarfile.GNU_FORMAT)
    path.write_bytes(gzip.compress(raw) if compress else raw)
    return path


def zeros_bomb(path: Path, size: int) -> Path:
    """A .tar.gz holding a module.vmfb of `size` zero bytes (small when packed)."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("b/module.vmfb")
        info.size = size
        tar.addfile(info, io.BytesIO(bytes(size)))
    return path


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """This process's temp directory, no one else's (other processes use /tmp meanwhile)."""
    folder = tmp_path / "controller-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    return folder


def test_a_header_claiming_5_gib_is_refused_before_extraction(tmp_path, private_tmp):
    with pytest.raises(BundleError, match="expands to more than 4,294,967,296 bytes"):
        load_bundle(header_only(tmp_path / "b.tar", "b/module.vmfb", 5 << 30))
    assert not any(private_tmp.iterdir())


def test_a_compression_bomb_is_refused_by_its_ratio_in_one_line_exit_6(tmp_path,
                                                                        private_tmp):
    bomb = zeros_bomb(tmp_path / "bomb.tar.gz", 80 << 20)
    assert bomb.stat().st_size < 2 << 20
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "edgekit", "deploy", str(bomb), "--host",
                          f"local:{tmp_path}"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 6, run.stderr
    lines = [line for line in run.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1 and "-fold" in lines[0] and "refused before extraction" in lines[0]
    assert time.monotonic() - started < 60 and not any(private_tmp.iterdir())


def test_the_cap_is_a_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_BUNDLE_MAX_BYTES", "1000")
    with pytest.raises(BundleError, match="more than 1,000 bytes"):
        load_bundle(header_only(tmp_path / "b.tar.gz", "b/module.vmfb", 2000, compress=True))
    monkeypatch.setenv("EDGEKIT_BUNDLE_MAX_BYTES", "lots")
    with pytest.raises(BundleError, match="must be a number of bytes"):
        load_bundle(header_only(tmp_path / "c.tar", "b/module.vmfb", 10))
