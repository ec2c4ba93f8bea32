#!/usr/bin/env python3
"""Which instruction set the peer's int8 kernels use on this host, and a switch to match ours.

Sapphire Rapids and later Xeons have AMX-INT8 tile instructions. onnxruntime's MLAS asks Linux
for AMX tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) when it starts and, if
granted, runs its u8×s8 GEMMs on AMX; IREE 3.13 has no AMX code path (its x86 int8 kernels are
AVX-512 VNNI, `vpdpbusd`/`vpdpwssd`), and no board edgekit targets has AMX. So on such a host an
"onnxruntime QDQ int8" figure can be a different instruction set from ours. `deny_amx()`
installs a seccomp filter that refuses that one arch_prctl request for the rest of the process:
MLAS then falls back to AVX-512 VNNI, as on a host without AMX. Nothing else changes (IREE and
PyTorch never ask for AMX tile state here); call it before onnxruntime runs anything.

Run alone, it measures the difference: onnxruntime's MatMulInteger, 1024×1024×1024 u8×s8,
1 thread, in two processes (AMX allowed, AMX denied).

    python bench/peer_isa.py

A run on this repository's host (Xeon with amx_int8 and avx512_vnni, idle; best of 10 calls):
AMX allowed 928 GMAC/s, denied 342 GMAC/s (the VNNI rate: 2.7× less). The small CNN's
onnxruntime QDQ model (32×32, ~4.8 M MACs) takes the same time either way (0.0377 vs
0.0360 ms in `bench/quantization_flags.py --qdq` runs without and with `--no-amx`): its GEMMs
are too small for MLAS's AMX path to matter, so its ratios there compare like with like.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import subprocess
import sys
import time
from pathlib import Path

_ALLOW = 0x7FFF0000                  # SCMP_ACT_ALLOW
_ERRNO_EPERM = 0x00050000 | 1        # SCMP_ACT_ERRNO(EPERM)
_CMP_EQ = 4                          # SCMP_CMP_EQ
_ARCH_PRCTL = 158                    # x86_64 syscall number
_ARCH_REQ_XCOMP_PERM = 0x1023


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def host_has_amx() -> bool:
    """Whether this CPU reports AMX-INT8 (Linux's /proc/cpuinfo flags)."""
    try:
        return " amx_int8" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def deny_amx() -> str:
    """Refuse AMX tile state to this process from now on; returns what was done, for the
    report's header. Raises SystemExit with the reason when the filter cannot be installed."""
    if not host_has_amx():
        return "no AMX on this host: the peer runs what we run"
    install_filter()
    return "AMX denied to onnxruntime (seccomp): its int8 GEMMs run on AVX-512 VNNI, as ours"


def install_filter() -> None:
    """The seccomp filter itself: arch_prctl(ARCH_REQ_XCOMP_PERM, …) fails with EPERM."""
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        raise SystemExit(f"--no-amx needs libseccomp (Debian: libseccomp2): {e}") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    ctx = ctypes.c_void_p(lib.seccomp_init(ctypes.c_uint32(_ALLOW)))
    rule = (_ArgCmp * 1)(_ArgCmp(0, _CMP_EQ, _ARCH_REQ_XCOMP_PERM, 0))
    if (lib.seccomp_rule_add_array(ctx, ctypes.c_uint32(_ERRNO_EPERM), _ARCH_PRCTL, 1, rule)
            or lib.seccomp_load(ctx)):
        raise SystemExit("--no-amx: the seccomp filter was refused by the kernel")
    lib.seccomp_release(ctx)


def _gemm_rate(n: int = 1024, calls: int = 10) -> float:
    """onnxruntime MatMulInteger n³ u8×s8 at 1 thread, in GMAC/s."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper
    rng = np.random.default_rng(0)
    weight = rng.integers(-100, 100, (n, n), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [n, n])],
        [helper.make_tensor("b", TensorProto.INT8, [n, n], weight.tobytes(), raw=True)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    a = rng.integers(0, 255, (n, n), dtype=np.uint8)
    for _ in range(3):
        session.run(None, {"a": a})
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        session.run(None, {"a": a})
        best = min(best, time.perf_counter() - start)
    return n ** 3 / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=("amx", "no-amx"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.child == "no-amx":
            deny_amx()
        print(json.dumps({"gmacs": _gemm_rate()}))
        return
    print(f"AMX-INT8 on this host: {'yes' if host_has_amx() else 'no'}")
    for mode in ("amx", "no-amx"):
        out = subprocess.run([sys.executable, __file__, "--child", mode], check=True,
                             capture_output=True, text=True).stdout
        rate = json.loads(out.strip().splitlines()[-1])["gmacs"]
        label = "AMX allowed" if mode == "amx" else "AMX denied "
        print(f"onnxruntime MatMulInteger 1024³ u8×s8, 1 thread, {label}: {rate:.0f} GMAC/s")


if __name__ == "__main__":
    main()
