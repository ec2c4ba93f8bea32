"""Stage `load`: the recipe's model source → the model (its frontend's) + sample inputs.

What every frontend shares: the golden input set from the recipe and user callables."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgekit.config.recipe import InputSpec, Recipe
from edgekit.errors import ConfigError, ModelLoadError

if TYPE_CHECKING:
    from edgekit.pipeline.frontends.base import Frontend


@dataclass(frozen=True)
class LoadedModel:
    frontend: Frontend                   # chosen from the recipe's `model:`; the rest use it
    model: object                        # the frontend's: only it looks inside
    samples: tuple[np.ndarray, ...]      # one golden input set, in argument order
    input_names: tuple[str, ...]
    notes: tuple[str, ...] = ()          # what loading changed (e.g. an opset upgrade)
    random_inputs: tuple[str, ...] = ()  # inputs whose sample edgekit made up
    more_samples: tuple[tuple[np.ndarray, ...], ...] = ()  # further validation samples
    # the model source's own example inputs (a factory's), as "[1, 49, 10] float32": what a
    # message names when the recipe's inputs do not fit the model
    example_inputs: tuple[str, ...] = ()


# Validation samples when edgekit draws them: the golden set and two more, distinct (cheap:
# each costs one reference run at build time and one module run per validation).
SAMPLE_SETS = 3


def more_like(samples: tuple[np.ndarray, ...], rng: np.random.Generator,
              count: int = SAMPLE_SETS - 1) -> tuple[tuple[np.ndarray, ...], ...]:
    """`count` further samples shaped and typed like `samples`, with values like each array's
    own (so ids, indices and masks stay as valid as the example's): floats normal with its mean
    and standard deviation (1 when constant; whole-number floats as whole numbers between its
    min and max), integers between its min and max, booleans as they are."""
    def like(array: np.ndarray) -> np.ndarray:
        if array.size == 0 or array.dtype.kind == "b":
            return array
        low, high = array.min(), array.max()
        if array.dtype.kind in "iu":
            return rng.integers(int(low), int(high), size=array.shape, endpoint=True
                                ).astype(array.dtype)
        if array.dtype.kind == "f" or array.dtype.isbuiltin == 2:
            values = array.astype(np.float64)
            if low < high and np.all(np.isfinite(values)) and np.all(values == np.round(values)):
                # whole numbers in a float tensor (indices, counts): drawn whole, within range
                return rng.integers(int(low), int(high), size=array.shape, endpoint=True
                                    ).astype(array.dtype)
            mean, std = float(values.mean()), float(values.std())
            if not np.isfinite([mean, std]).all():
                mean, std = 0.0, 1.0
            return np.require(rng.normal(mean, std or 1.0, size=array.shape).astype(np.float32)
                              .astype(array.dtype), requirements="C")
        return array
    return tuple(tuple(like(a) for a in samples) for _ in range(count))


def import_callable(recipe: Recipe, spec: str, what: str):
    """The callable named by 'package.module:name' or 'file.py:name' (relative to the recipe)."""
    module_part, _, attr = spec.rpartition(":")
    try:
        if module_part.endswith(".py"):
            path = recipe.resolve(module_part)
            if not path.is_file():
                raise ModelLoadError(f"{what} file not found: {path}", where=str(recipe.path))
            mod_spec = importlib.util.spec_from_file_location(f"edgekit_user_{path.stem}", path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_spec.name] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_part)
    except ModelLoadError:
        raise
    except ImportError as exc:
        raise ModelLoadError(f"cannot import '{module_part}' ({what}): {exc}",
                             where=str(recipe.path),
                             hint="check the 'module:name' and that the package is installed") \
            from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise ModelLoadError(f"'{module_part}' has no callable '{attr}' ({what})",
                             where=str(recipe.path))
    return found


def read_npz(path: Path, key: str) -> dict[str, np.ndarray]:
    """Every array of a user's .npz (numbers only: an object array would need pickle, which is
    never allowed). A file that is no such archive is a ConfigError on the recipe's `key`."""
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an .npz archive")
        with data:  # np.require keeps 0-d arrays 0-d (ascontiguousarray makes them [1])
            return {name: np.require(_member(data, name), requirements="C")
                    for name in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if "allow_pickle" in reason:
            reason = "it holds an object array (loading it would unpickle code)"
        raise ConfigError(f"cannot read {path.name}: {reason}", where=str(path), key=key,
                          hint="save numeric arrays with numpy.savez(path, name=array, ...)") \
            from None


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a recipe dtype name (bfloat16 and float8 kinds from ml_dtypes)."""
    if name.startswith(("bfloat16", "float8")):
        import ml_dtypes  # noqa: F401  registers its names with numpy
    return np.dtype(name)


def as_declared(array: np.ndarray, dtype: str) -> np.ndarray:
    """A sample read from a .npy/.npz as `dtype`: numpy writes ml_dtypes arrays (bfloat16,
    float8) as raw bytes ('<V2'), which come back as void of the same width."""
    wanted = numpy_dtype(dtype)
    if array.dtype.kind == "V" and array.dtype.itemsize == wanted.itemsize \
            and array.dtype != wanted:
        return array.view(wanted)
    return array


def more_samples_for(recipe: Recipe, first: tuple[np.ndarray, ...],
                     keep: tuple[int, ...] = ()) -> tuple[tuple[np.ndarray, ...], ...]:
    """The validation samples after the first: random ones as declared in `inputs:`, else
    ones like the first (the user's `samples:` or the model source's example). With a user's
    single sample set the drawn ones are what the "same output for every sample" check needs:
    without them a module that ignores its inputs would pass. `keep`: positions of inputs that
    stay as in `first` (shapes, axes: values the model is built for)."""
    rng = np.random.default_rng([recipe.seed, 1])   # not the first sample's stream
    if recipe.inputs and not recipe.samples:
        return tuple(tuple(random_input(spec, recipe, rng) for spec in recipe.inputs)
                     for _ in range(SAMPLE_SETS - 1))
    drawn = more_like(first, rng)
    return tuple(tuple(first[i] if i in keep else a for i, a in enumerate(s)) for s in drawn)


DRAWN_PREFIX = "the recipe's `samples:` is one input set"
DRAWN_NONE = (f"{DRAWN_PREFIX} and no other could be drawn like it: an output the same for "
              "every input would not be caught")


def drawn_note(count: int) -> str:
    return (f"{DRAWN_PREFIX}: {count} more drawn like it (values within its range) for "
            "validation, so that an output the same for every input is caught")


def coverage_notes(names: tuple[str, ...], sets) -> tuple[str, ...]:
    """One note per input that holds one value everywhere in every sample (a mask all ones,
    token ids all the same): the paths other values take are not validated."""
    notes = []
    for i, name in enumerate(names):
        arrays = [s[i] for s in sets if i < len(s)]
        if not arrays or any(a.size < 2 for a in arrays):
            continue
        first = arrays[0].reshape(-1)[0]
        if all(np.all(a == first) for a in arrays):
            notes.append(f"input {name!r} is {first.item()!r} everywhere in every validation "
                         "sample: what other values do is not validated (give samples that "
                         "vary it)")
    return tuple(notes)


def _member(data, name: str) -> np.ndarray:
    """One array of an .npz; numpy writes ml_dtypes' float8_e5m2 with the descriptor '<f1',
    which it cannot read back: such an array comes back as raw bytes ('V1', viewed as the
    declared dtype by as_declared)."""
    try:
        return data[name]
    except ValueError as exc:
        if "'<f1'" not in str(exc):
            raise
    import ast
    raw = data.zip.read(name if name.endswith(".npy") else f"{name}.npy")
    if not raw.startswith(b"\x93NUMPY"):
        raise ValueError(f"{name}: not a .npy member")
    size_bytes = 2 if raw[6] == 1 else 4
    header_len = int.from_bytes(raw[8:8 + size_bytes], "little")
    start = 8 + size_bytes
    header = ast.literal_eval(raw[start:start + header_len].decode("latin1"))
    shape = tuple(header["shape"])
    body = raw[start + header_len:]
    if header.get("fortran_order") or len(body) != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"{name}: unexpected layout of a '<f1' array")
    return np.frombuffer(body, dtype="V1").reshape(shape).copy()


def sample_inputs(recipe: Recipe, examples: tuple[np.ndarray, ...] | None,
                  specs: tuple[InputSpec, ...] | None = None) -> tuple[np.ndarray, ...]:
    """The golden input set: the recipe's samples file, else random inputs as declared, else
    the model source's example inputs. `specs`: the model's own signature where it has one
    (ONNX), used when the recipe declares no `inputs:`."""
    specs = recipe.inputs or specs or ()
    if recipe.samples:
        where = str(recipe.resolve(recipe.samples))
        data = read_npz(recipe.resolve(recipe.samples), "samples")
        names = [s.name for s in specs] or list(data)
        missing = [n for n in names if n not in data]
        if missing:
            raise ModelLoadError(f"samples file lacks inputs {missing} (has {list(data)})",
                                 where=where,
                                 hint="save one array per model input under its name")
        arrays = tuple(as_declared(data[s.name], s.dtype) for s in specs) if specs else \
            tuple(data[n] for n in names)
        for spec, array in zip(specs, arrays):
            _check_sample(spec, array, recipe, where)
        return arrays
    if recipe.inputs:
        rng = np.random.default_rng(recipe.seed)
        return tuple(random_input(spec, recipe, rng) for spec in recipe.inputs)
    if examples is None:
        raise ModelLoadError("no input signature: the recipe has no `inputs:` and the model "
                             "source gives no example inputs", where=str(recipe.path),
                             hint="add `inputs:` (name, shape, dtype) to the recipe")
    return examples


def _check_sample(spec: InputSpec, array: np.ndarray, recipe: Recipe, where: str) -> None:
    fits = len(array.shape) == len(spec.shape) and all(
        isinstance(d, str) or d == n for d, n in zip(spec.shape, array.shape))
    if not fits or str(array.dtype) != spec.dtype:
        raise ModelLoadError(
            f"sample {spec.name!r} is {array.dtype}{list(array.shape)} but the "
            f"{'recipe declares' if recipe.inputs else 'model takes'} "
            f"{spec.dtype}{list(spec.shape)}", where=where,
            hint=f"save {spec.name!r} as a {spec.dtype} array of that shape")


def example_shape(spec: InputSpec, recipe: Recipe) -> tuple[int, ...]:
    """The sizes of a random sample: named dims at their `example` (else `min`) size."""
    return tuple(d if isinstance(d, int) else
                 (recipe.dynamic_dims[d].example or recipe.dynamic_dims[d].min)
                 for d in spec.shape)


def random_input(spec: InputSpec, recipe: Recipe, rng: np.random.Generator) -> np.ndarray:
    return random_array(spec.dtype, example_shape(spec, recipe), rng, spec.low, spec.high)


def random_array(dtype: str, shape: tuple[int, ...], rng: np.random.Generator,
                 low: float | None = None, high: float | None = None) -> np.ndarray:
    """Random values of `dtype`: booleans, integers in [low, high) (default [0, 100) clipped
    to the type), floats uniform in [low, high) (default [-1, 1)), drawn in float32 and
    rounded to narrower float types."""
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        lo = int(low) if low is not None else max(info.min, 0)
        hi = int(high) if high is not None else min(info.max, 100)
        return rng.integers(lo, hi, size=shape, endpoint=False).astype(dtype)
    lo = low if low is not None else -1.0
    hi = high if high is not None else 1.0
    values = rng.uniform(lo, hi, size=shape)
    if dtype != "float64":
        values = values.astype(np.float32)
    return np.require(values.astype(numpy_dtype(dtype)), requirements="C")
