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
        with data:
            return {name: np.ascontiguousarray(data[name]) for name in data.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if "allow_pickle" in reason:
            reason = "it holds an object array (loading it would unpickle code)"
        raise ConfigError(f"cannot read {path.name}: {reason}", where=str(path), key=key,
                          hint="save numeric arrays with numpy.savez(path, name=array, ...)") \
            from None


def sample_inputs(recipe: Recipe, examples: tuple[np.ndarray, ...] | None
                  ) -> tuple[np.ndarray, ...]:
    """The golden input set: the recipe's samples file, else random inputs as declared, else
    the model source's example inputs."""
    if recipe.samples:
        data = read_npz(recipe.resolve(recipe.samples), "samples")
        names = [s.name for s in recipe.inputs] or list(data)
        missing = [n for n in names if n not in data]
        if missing:
            raise ModelLoadError(f"samples file lacks inputs {missing} (has {list(data)})",
                                 where=str(recipe.resolve(recipe.samples)))
        arrays = tuple(data[n] for n in names)
        for spec, array in zip(recipe.inputs, arrays):
            _check_sample(spec, array, recipe)
        return arrays
    if recipe.inputs:
        rng = np.random.default_rng(recipe.seed)
        return tuple(random_input(spec, recipe, rng) for spec in recipe.inputs)
    if examples is None:
        raise ModelLoadError("no input signature: the recipe has no `inputs:` and the model "
                             "source gives no example inputs", where=str(recipe.path),
                             hint="add `inputs:` (name, shape, dtype) to the recipe")
    return examples


def _check_sample(spec: InputSpec, array: np.ndarray, recipe: Recipe) -> None:
    fits = len(array.shape) == len(spec.shape) and all(
        isinstance(d, str) or d == n for d, n in zip(spec.shape, array.shape))
    if not fits or str(array.dtype) != spec.dtype:
        raise ModelLoadError(
            f"sample '{spec.name}' is {array.dtype}{list(array.shape)} but the recipe declares "
            f"{spec.dtype}{list(spec.shape)}", where=str(recipe.resolve(recipe.samples or "")))


def random_input(spec: InputSpec, recipe: Recipe, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(d if isinstance(d, int) else
                  (recipe.dynamic_dims[d].example or recipe.dynamic_dims[d].min)
                  for d in spec.shape)
    if spec.dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if spec.dtype.startswith(("int", "uint")):
        info = np.iinfo(spec.dtype)
        low = int(spec.low) if spec.low is not None else max(info.min, 0)
        high = int(spec.high) if spec.high is not None else min(info.max, 100)
        return rng.integers(low, high, size=shape, endpoint=False).astype(spec.dtype)
    low = spec.low if spec.low is not None else -1.0
    high = spec.high if spec.high is not None else 1.0
    return rng.uniform(low, high, size=shape).astype(spec.dtype)
