"""install_bundle.sh's on-device comparison (od + awk, no Python) gives the verdicts of the
host's (validate/compare.py) on the cases that matter: tolerances at their edge, NaN/Inf
places, cosine, arg-max, every dtype it decodes bit for bit."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgekit.config.recipe import Tolerance
from edgekit.validate.compare import compare_output, wants_top1
from edgekit.validate.tolerance import limits

SHIM = Path(__file__).resolve().parents[2] / "runtime_shims" / "install_bundle.sh"
CODEC = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32",
         "int64": "i64", "uint8": "u8", "bool": "b1", "int8": "i8"}

rng = np.random.default_rng(7)
base = rng.standard_normal((3, 10)).astype(np.float32)
nan = base.copy()
nan[1, 2] = np.nan
inf = base.copy()
inf[0, 0] = np.inf
big = np.array([2 ** 60, 5, -3], dtype=np.int64)

CASES = {
    "equal": (base, base, Tolerance()),
    "within atol": (base + np.float32(5e-5), base, Tolerance()),
    "beyond atol": (base + np.float32(3e-3), base, Tolerance()),
    "rtol decides": (base * np.float32(1.0009), base, Tolerance(atol=0)),
    "rtol exceeded": (base * np.float32(1.0011), base, Tolerance(atol=0)),
    "nan same place": (nan, nan, Tolerance()),
    "nan elsewhere": (base, nan, Tolerance()),
    "inf sign": (-inf, inf, Tolerance(atol=100)),
    "cosine": (base * np.sign(rng.standard_normal((3, 10))).astype(np.float32), base,
               Tolerance(atol=1, rtol=3)),
    "cosine holds": (base * np.float32(1.5), base, Tolerance(atol=1, rtol=3)),
    "top1": (base[:, ::-1].copy(), base, Tolerance(atol=10, min_cosine=-1, top1="always")),
    "float64": (base.astype(np.float64) + 1e-9, base.astype(np.float64), Tolerance(atol=0,
                                                                                    rtol=0)),
    "float16": (base.astype(np.float16), (base + 0.004).astype(np.float16), Tolerance()),
    "float16 beyond": (base.astype(np.float16), (base + 0.1).astype(np.float16), Tolerance()),
    "tiny subnormal f32": (np.array([1e-44, 0], np.float32), np.array([0, 0], np.float32),
                           Tolerance(atol=0, rtol=0)),
    "int32 equal": (np.arange(6, dtype=np.int32), np.arange(6, dtype=np.int32), Tolerance()),
    "int32 differs": (np.arange(6, dtype=np.int32) + (np.arange(6) == 4), np.arange(6,
                      dtype=np.int32), Tolerance()),
    "int64 past 2^53": (big + np.array([1, 0, 0]), big, Tolerance()),
    "bool": (np.array([True, False]), np.array([True, True]), Tolerance()),
    "scalar": (np.float32(1.5), np.float32(1.5), Tolerance()),
    "int8 with a tolerance": (np.array([3, 4], np.int8), np.array([4, 4], np.int8),
                              Tolerance(atol=1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_device_and_the_host_give_the_same_verdict(case, tmp_path):
    actual, golden, tol = CASES[case]
    actual, golden = np.asarray(actual), np.asarray(golden)
    np.save(tmp_path / "output_0.npy", actual)
    np.save(tmp_path / "golden.npy", golden)
    dtype = str(golden.dtype)
    lim = limits(tol, dtype)
    host = compare_output("out", actual, golden, lim)
    shape = ",".join(map(str, golden.shape)) or "scalar"
    device = subprocess.run(
        ["sh", str(SHIM), "compare-output", str(tmp_path / "output_0.npy"),
         str(tmp_path / "golden.npy"), CODEC[dtype], golden.dtype.str, shape,
         repr(lim.atol), repr(lim.rtol), repr(lim.min_cosine), str(int(lim.exact)),
         str(int(wants_top1(lim.top1, "out", golden)))],
        capture_output=True, text=True, timeout=60)
    assert device.returncode in (0, 1), device.stderr
    assert (device.returncode == 0) == host.ok, (host.problems, device.stderr)
    if not host.ok:      # the same first reason, in the same words
        assert host.problems[0].split(" (")[0].split(" at ")[0][:20] in device.stderr


def test_a_wrong_shape_or_dtype_fails(tmp_path):
    np.save(tmp_path / "a.npy", base.reshape(30))
    np.save(tmp_path / "g.npy", base)
    out = subprocess.run(["sh", str(SHIM), "compare-output", str(tmp_path / "a.npy"),
                          str(tmp_path / "g.npy"), "f32", "<f4", "3,10", "1e-4", "1e-3",
                          "0.999", "0", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "shape (30), expected <f4 (3,10)" in out.stderr
