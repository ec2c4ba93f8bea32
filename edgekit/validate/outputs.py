"""Output files as the IREE runtime writes them, read back as the manifest declares them.

iree-run-module writes .npy only for numpy's own dtypes (for bfloat16 it stops with
"UNIMPLEMENTED; unsupported data encoding"); `--output=@file.bin` writes any dtype's raw
bytes. IREE's integers are signless, so a uint8 result comes back labelled int8; numpy saves an
ml_dtypes array (bfloat16, float8_*) as raw 'V2'/'V1' records. Both are read as the declared
dtype where the bits are the same width. Pure numpy (ml_dtypes, which onnx brings, for names
numpy lacks).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# what iree-run-module's numpy writer takes (runtime/src/iree/tooling/numpy_io.c)
NPY_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64", "float16", "float32", "float64", "complex64", "complex128"})


def numpy_dtype(name: str) -> np.dtype | None:
    """The numpy dtype named `name` (ml_dtypes' for bfloat16, float8_*, int4 …), or None."""
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        return None
    found = getattr(ml_dtypes, name, None)
    return np.dtype(found) if found is not None else None


# Room for a .npy file's header beside its data: numpy writes 128 bytes for any shape we
# produce (the header is padded to 64-byte multiples; a dozen dimensions fit in 128).
NPY_HEADER_ALLOWANCE = 4096


def output_byte_cap(nbytes: int) -> int:
    """The most bytes an output file holding `nbytes` of data may be: what a device's output
    is fetched up to (transport `get`'s max_bytes), the data and a .npy header."""
    return int(nbytes) + NPY_HEADER_ALLOWANCE


def static_nbytes(shape: tuple[int | str, ...], dtype: str) -> int | None:
    """The bytes of an array of `shape` and `dtype`; None when a dimension is not static or
    the dtype is unknown here."""
    want = numpy_dtype(dtype)
    if want is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    count = 1
    for d in shape:
        count *= d
    return count * want.itemsize


def check_npy(path: Path) -> None:
    """A .npy file whose header agrees with its size, before numpy reads it: a header that
    declares 2^40 elements in a file of 200 bytes would make numpy allocate them (MemoryError).
    Raises ValueError naming what is wrong."""
    from numpy.lib import format as npy
    size = path.stat().st_size
    with open(path, "rb") as f:
        try:
            version = npy.read_magic(f)
            shape, _, dtype = (npy.read_array_header_1_0(f) if version == (1, 0) else
                               npy.read_array_header_2_0(f))
        except (ValueError, EOFError, SyntaxError, TypeError) as exc:
            raise ValueError(f"{path.name} is not a .npy file ({exc})") from None
        if dtype.hasobject:
            raise ValueError(f"{path.name} holds Python objects")
        count = 1
        for d in shape:
            count *= int(d)
        declared = count * dtype.itemsize
        if f.tell() + declared != size:
            raise ValueError(f"{path.name} is {size:,} bytes, but its header declares "
                             f"{declared:,} bytes of data (shape {tuple(shape)}, {dtype})")


def output_file(index: int, dtype: str) -> str:
    """The file name output `index` is written to: .npy where IREE can write it, else .bin."""
    return f"output_{index}.{'npy' if dtype in NPY_DTYPES else 'bin'}"


def as_declared(array: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """`array` as the declared dtype where only the label differs: integers of the same width
    and another signedness, or raw records ('V') of the declared width. Anything else is
    returned as it is (and a dtype check fails it)."""
    want = dtype if isinstance(dtype, np.dtype) else numpy_dtype(dtype)
    have = array.dtype
    if want is None or have == want or have.itemsize != want.itemsize:
        return array
    if (have.kind in "iu" and want.kind in "iu") or have.kind == "V":
        return array.view(want)
    return array


def read_output(path: Path, dtype: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """An output file as declared: .npy (relabelled by :func:`as_declared`) or raw .bin of
    `dtype` in `shape` (the golden output's). Raises ValueError for a file that is neither."""
    if path.suffix != ".bin":
        check_npy(path)
        return as_declared(np.load(path, allow_pickle=False), dtype)
    want = numpy_dtype(dtype)
    if want is None:
        raise ValueError(f"dtype {dtype} is unknown here")
    if shape is None or not all(isinstance(d, int) for d in shape):
        raise ValueError(f"a raw {dtype} output needs a static shape, not {shape}")
    data = np.fromfile(path, dtype=want)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path.name} holds {data.size} {dtype} values, expected "
                         f"{int(np.prod(shape))} for shape {tuple(shape)}")
    return data.reshape(shape)
