"""bench/peer_isa.py's switch that keeps onnxruntime off AMX, tested on the real kernel: after
the filter, the one arch_prctl request that grants AMX tile state fails with EPERM, and other
arch_prctl calls still work."""

import platform
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"

PROBE = f"""
import ctypes, errno, sys
sys.path.insert(0, {str(BENCH)!r})
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def arch_prctl(code, arg):
    ctypes.set_errno(0)
    rc = libc.syscall(158, ctypes.c_long(code), ctypes.c_long(arg))
    return rc, ctypes.get_errno()
from peer_isa import install_filter
install_filter()
rc, err = arch_prctl(0x1023, 18)              # ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
print("request", rc, errno.errorcode.get(err))
fs = ctypes.c_ulong(0)
rc, err = arch_prctl(0x1003, ctypes.addressof(fs))   # ARCH_GET_FS: still allowed
print("get_fs", rc, fs.value != 0)
"""


def test_after_the_filter_the_amx_permission_request_is_refused_and_nothing_else_is():
    assert platform.machine() == "x86_64", "the AMX switch (and this suite's host) is x86_64"
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    assert out[0] == "request -1 EPERM"
    assert out[1] == "get_fs 0 True"
