"""The same bounds over SSH (SFTP is its own code path): on a real sshd lab device, a download
is refused for a link, a FIFO or a file over its cap before a byte is read (the device's lstat,
then fstat of the opened handle); a journal is read from its end; a download slower than its
byte deadline ends although every block arrives within the idle deadline."""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from edgekit.config.address import parse_address
from edgekit.config.timeouts import Timeouts
from edgekit.errors import DeviceAnswerRefused, DeviceUnreachable
from edgekit.lab import devices as lab
from edgekit.transport.base import transfer_deadline
from edgekit.transport.ssh import connect, pin_host_key
from tests.faults.proxy import FaultProxy


@pytest.fixture
def planted(fault_device):
    """A folder in the device user's home to plant files in: (path on this machine, remote)."""
    remote = ".edgekit/hostile-test"
    local = fault_device.host_path(f"{fault_device.home}/{remote}")
    local.mkdir(parents=True, exist_ok=True)
    yield local, remote
    subprocess.run(["rm", "-rf", str(local)], check=False)


def test_sftp_refuses_a_link_a_fifo_and_a_large_file_before_reading_them(fault_device,
                                                                          planted, tmp_path):
    local, remote = planted
    (local / "zero.npy").symlink_to("/dev/zero")
    os.mkfifo(local / "fifo.npy")
    with open(local / "big.npy", "wb") as f:
        f.truncate(64 << 20)
    (local / "ok.npy").write_bytes(b"x" * 100)
    with connect(parse_address(f"{fault_device.user}@{fault_device.host}:{fault_device.port}"),
                 lab.identity_path()) as conn:
        for name, why in (("zero.npy", "is a symlink"), ("fifo.npy", "is a FIFO"),
                          ("big.npy", "is 67,108,864 bytes, more than the 4,096 expected")):
            started = time.monotonic()
            with pytest.raises(DeviceAnswerRefused, match=re.escape(why)):
                conn.get(f"{remote}/{name}", tmp_path / name, max_bytes=4096)
            assert time.monotonic() - started < 5 and not (tmp_path / name).exists()
        assert conn.get(f"{remote}/ok.npy", tmp_path / "ok.npy", max_bytes=100) == 100
        with pytest.raises(DeviceAnswerRefused, match="more than the 99 expected"):
            conn.get(f"{remote}/ok.npy", tmp_path / "ok2.npy", max_bytes=99)
        with pytest.raises(DeviceAnswerRefused, match="is a symlink"):
            conn.read_text(f"{remote}/zero.npy")
        (local / "journal.jsonl").write_bytes(b"junk" * 300_000 + b"\nlast line\n")
        assert conn.read_tail(f"{remote}/journal.jsonl", max_bytes=1000) == "last line\n"


def test_a_download_slower_than_its_byte_deadline_ends_with_exit_10(fault_device, planted,
                                                                    tmp_path):
    local, remote = planted
    size = 400_000     # 20 s at 20 kB/s; its byte deadline: 5 s + 400 kB at 64 KiB/s
    (local / "slow.npy").write_bytes(b"\0" * size)
    pub = (Path(fault_device.config_dir) / "ssh_host_ed25519_key.pub").read_text().split()
    timeouts = Timeouts(sftp_s=5, auth_s=20)
    budget = transfer_deadline(timeouts.sftp_s, size)
    with FaultProxy((fault_device.host, fault_device.port)) as proxy:
        address = f"{fault_device.user}@{proxy.host}:{proxy.port}"
        pin_host_key(parse_address(address), pub[0], pub[1], replace=True)
        with connect(parse_address(address), lab.identity_path(), timeouts=timeouts) as conn:
            proxy.slow(20_000)     # a 32 kB block every ~1.6 s: within the idle deadline
            started = time.monotonic()
            with pytest.raises(DeviceUnreachable, match="slower than its deadline allows"):
                conn.get(f"{remote}/slow.npy", tmp_path / "slow.npy", max_bytes=size)
            assert budget - 1 < time.monotonic() - started < budget + timeouts.sftp_s + 2
