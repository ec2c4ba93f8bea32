"""npu_probe.sh on this machine (which has no NPU) and the host's reading of it."""

import os
import subprocess
from pathlib import Path

import pytest

from edgekit.config.profiles import NpuSpec
from edgekit.device.npu_preflight import (describe, npu_problems, parse_npu_probe,
                                          probe_arguments)

SHIM = Path(__file__).resolve().parents[2] / "runtime_shims" / "npu_probe.sh"
RK3588 = NpuSpec(kind="rknpu", accelerator="rk3588", device_files=("/dev/dri/renderD129",),
                 libraries=("librknnrt.so",), kernel_module="rknpu")


# an ordinary user's PATH on Debian: no /sbin, so no ldconfig by name
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


def probe(*args: str, path: str | None = None) -> str:
    # as deploy sends it: the script on stdin, each argument its own word
    env = None if path is None else {**os.environ, "PATH": path}
    proc = subprocess.run(["sh", "-s", "--", *args], input=SHIM.read_bytes(),
                          capture_output=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_a_machine_without_the_npu_lacks_each_thing_the_profile_names():
    found = parse_npu_probe(probe(*probe_arguments(RK3588)))
    assert found.device_files == {"/dev/dri/renderD129": False}
    assert found.libraries == {"librknnrt.so": None} and found.driver == ("rknpu", None)
    problems = npu_problems(RK3588, found)
    assert problems[0] == "no /dev/dri/renderD129 on the device (the rk3588 NPU's device file)"
    assert "librknnrt.so" in problems[1] and "rknpu kernel driver" in problems[2]


def test_what_is_there_is_found():
    present = NpuSpec(kind="rknpu", accelerator="x", device_files=("/dev/null",),
                      libraries=("libc.so.6",))
    found = parse_npu_probe(probe(*probe_arguments(present)))
    assert npu_problems(present, found) == []
    assert found.libraries["libc.so.6"].endswith("/libc.so.6")


def only_in_ldconfigs_cache() -> tuple[str, str] | None:
    """A library that ldconfig knows but that sits outside every folder the probe looks in."""
    folders = {"/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64",
               f"/usr/lib/{os.uname().machine}-linux-gnu", f"/lib/{os.uname().machine}-linux-gnu"}
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(ldconfig, os.X_OK):
            break
    else:
        return None
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines()[1:]:
        name, _, path = line.strip().partition(" (")
        path = path.rpartition("=> ")[2]
        if path and os.path.dirname(path) not in folders and os.path.exists(path):
            return name, path
    return None


def test_an_ordinary_users_path_without_sbin_still_finds_libraries():
    present = NpuSpec(kind="rknpu", accelerator="x", libraries=("libc.so.6",))
    found = parse_npu_probe(probe(*probe_arguments(present), path=USER_PATH))
    assert found.libraries["libc.so.6"].endswith("/libc.so.6")
    cached = only_in_ldconfigs_cache()
    if cached is None:
        pytest.skip("every library ldconfig knows here sits in a folder the probe reads")
    name, where = cached
    spec = NpuSpec(kind="rknpu", accelerator="x", libraries=(name,))
    assert parse_npu_probe(probe(*probe_arguments(spec), path=USER_PATH)).libraries == {name: where}


def test_an_argument_is_data_never_shell(tmp_path):
    marker = tmp_path / "ran"
    out = probe(f"dev=/dev/x; touch {marker}", f"lib=$(touch {marker})")
    assert not marker.exists()
    assert f"device_file=/dev/x; touch {marker} missing" in out


def test_the_driver_version_is_read_from_its_text():
    found = parse_npu_probe("driver=rknpu RKNPU driver: v0.9.6\n")
    assert found.driver_version == "0.9.6"
    assert "rknpu driver 0.9.6" in describe(RK3588, found)
