"""Output files as the runtime writes them and the host reads them back.

iree-run-module writes outputs as .npy, except bfloat16 and float8 ones ("numpy_io.c:
UNIMPLEMENTED; unsupported data encoding"): those are written as raw little-endian bytes
(`--output=@output_<i>.bin`), which the host reads with the manifest's dtype and shape. numpy
itself stores those types as raw bytes of their width ('<V2'), read back as void."""

from __future__ import annotations

from pathlib import Path

import numpy as np

_RAW = ("bfloat16", "float8")


def output_name(index: int, dtype: str) -> str:
    """The file the runtime writes output `index` to."""
    return f"output_{index}.{'bin' if dtype.startswith(_RAW) else 'npy'}"


def _dtype(name: str) -> np.dtype:
    if name.startswith(_RAW):
        import ml_dtypes  # noqa: F401  registers bfloat16 and float8 with numpy
    return np.dtype(name)


def read_array(path: Path, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An output or golden array as `dtype` (raw .bin files need `shape`)."""
    if path.suffix == ".bin":
        return np.fromfile(path, dtype=_dtype(dtype)).reshape(shape or (-1,))
    array = np.load(path, allow_pickle=False)
    if array.dtype.kind == "V" and dtype.startswith(_RAW):
        return array.view(_dtype(dtype))
    return array
