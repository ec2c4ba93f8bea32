"""Validation outputs from a device that lies: fetched only as regular files of the size the
manifest implies (plus a .npy header), never followed through a link, and read only once their
header agrees with their size. Each case ends with one typed error, `current` unchanged, and
the controller's memory and temp disk bounded."""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from edgekit.device.deploy import deploy_bundle
from edgekit.errors import DeviceAnswerRefused, RemoteCommandFailed
from tests.faults.hostile_device.conftest import outputs_loop, replace_tool
from tests.local.conftest import current_of, releases_on

REPO = Path(__file__).resolve().parents[3]


def deployed_v1(make_device, v1):
    device = make_device()
    first = deploy_bundle(device, v1)
    return device, first.release


def test_an_output_made_a_symlink_to_dev_zero_is_refused_before_a_byte_is_read(
        make_device, v1, v2, peak_rss_kib, tmp_path, monkeypatch):
    device, old = deployed_v1(make_device, v1)
    replace_tool(device.root, outputs_loop('ln -sf /dev/zero "$f"'))
    private_tmp = tmp_path / "controller-tmp"     # this controller's temp, no one else's
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))
    rss_before, started = peak_rss_kib(), time.monotonic()
    with pytest.raises(DeviceAnswerRefused, match="is a symlink, not a regular file") as err:
        deploy_bundle(device, v2)
    assert err.value.exit_code == 15 and "\n" not in err.value.what
    assert time.monotonic() - started < 30
    assert current_of(device.root) == old and releases_on(device.root) == {old}
    assert not any(private_tmp.iterdir())         # nothing left in the controller's temp
    assert peak_rss_kib() - rss_before < 50 * 1024   # the peak grew by less than 50 MiB


def test_an_output_larger_than_the_manifest_implies_is_refused_by_its_size(make_device, v1,
                                                                           v2):
    device, old = deployed_v1(make_device, v1)
    # 64 MiB where the manifest implies a few hundred bytes: refused by its size, not read
    replace_tool(device.root, outputs_loop('head -c 67108864 /dev/zero > "$f"'))
    with pytest.raises(DeviceAnswerRefused, match=r"is 67,108,864 bytes, more than the "
                                                  r"[\d,]+ expected") as err:
        deploy_bundle(device, v2)
    assert "refused" in err.value.what
    assert current_of(device.root) == old


def test_a_fifo_as_an_output_does_not_block_the_download(make_device, v1, v2):
    device, old = deployed_v1(make_device, v1)
    replace_tool(device.root, outputs_loop('rm -f "$f"; mkfifo "$f"'))
    started = time.monotonic()
    with pytest.raises(DeviceAnswerRefused, match="is a FIFO"):
        deploy_bundle(device, v2)
    assert time.monotonic() - started < 30 and current_of(device.root) == old


def test_an_npy_header_declaring_2_to_the_40_elements_is_a_typed_error_not_memory_error(
        make_device, v1, v2):
    device, old = deployed_v1(make_device, v1)
    header = Path(tempfile.mkdtemp()) / "huge.npy"
    with open(header, "wb") as f:   # a valid header for float32 (2**40,), and no data
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 40,)})
    replace_tool(device.root, outputs_loop(f'cp {header} "$f"'))
    with pytest.raises(RemoteCommandFailed, match="its header declares 4,398,046,511,104 "
                                                  "bytes of data"):
        deploy_bundle(device, v2)
    assert current_of(device.root) == old


def test_the_cli_ends_a_hostile_output_with_one_line_and_exit_15(make_device, v1, builds):
    device = make_device()
    deploy_bundle(device, v1)
    replace_tool(device.root, outputs_loop('ln -sf /dev/zero "$f"'))
    run = subprocess.run([sys.executable, "-m", "edgekit", "deploy", str(builds["v2"]),
                          "--host", f"local:{device.root}"], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 15, run.stderr
    lines = run.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "not a regular file" in lines[0], run.stderr
    assert "Traceback" not in run.stderr
