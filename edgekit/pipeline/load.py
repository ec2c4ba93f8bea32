"""Stage `load`: the recipe's model source → an nn.Module (or ExportedProgram) + sample inputs."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

import numpy as np
import torch

from edgekit.config.recipe import InputSpec, Recipe
from edgekit.errors import ModelLoadError


if TYPE_CHECKING:
    import onnx

@dataclass(frozen=True)
class LoadedModel:
    model: "torch.nn.Module | torch.export.ExportedProgram | onnx.ModelProto"
    samples: tuple[np.ndarray, ...]      # one golden input set, in argument order
    input_names: tuple[str, ...]


def load_model(recipe: Recipe) -> LoadedModel:
    source = recipe.model
    if source.onnx:
        return _load_onnx(recipe)
    if source.exported:
        model, examples = _load_exported(recipe.resolve(source.exported)), None
    else:
        model, examples = _call_factory(recipe, source.python or "")
    samples = _samples(recipe, examples)
    names = tuple(s.name for s in recipe.inputs) or _argument_names(model, len(samples))
    return LoadedModel(model=model, samples=samples, input_names=names)


def _load_onnx(recipe: Recipe) -> LoadedModel:
    from edgekit.pipeline.onnx_source import load_onnx, onnx_inputs
    path = recipe.resolve(recipe.model.onnx or "")
    model = load_onnx(path)
    graph_inputs = onnx_inputs(model)
    if recipe.inputs:
        names = tuple(s.name for s in recipe.inputs)
        missing = sorted(set(names) - {n for n, _, _ in graph_inputs})
        if missing:
            raise ModelLoadError(f"the model has no input(s) {missing}", where=str(path),
                                 hint="its inputs: " + ", ".join(n for n, _, _ in graph_inputs))
        return LoadedModel(model, _samples(recipe, None), names)
    dynamic = {n: [d for d in shape if isinstance(d, str)] for n, shape, _ in graph_inputs}
    dynamic = {n: d for n, d in dynamic.items() if d}
    if dynamic:
        raise ModelLoadError(
            "the model has dynamic input dimensions: " + "; ".join(
                f"{n}: {', '.join(d)}" for n, d in dynamic.items()), where=str(path),
            hint="declare `inputs:` with sizes (or named dims under `dynamic_dims`) in the "
                 "recipe")
    rng = np.random.default_rng(recipe.seed)
    specs = [InputSpec(name=n, shape=shape, dtype=dtype) for n, shape, dtype in graph_inputs]
    samples = tuple(random_input(spec, recipe, rng) for spec in specs)
    return LoadedModel(model, samples, tuple(n for n, _, _ in graph_inputs))


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


def _call_factory(recipe: Recipe, spec: str):
    factory = import_callable(recipe, spec, "model factory")
    try:
        result = factory()
    except Exception as exc:  # user code: report it as a load failure, not a crash
        raise ModelLoadError(f"factory '{spec}' raised {type(exc).__name__}: {exc}",
                             where=str(recipe.path)) from None
    if isinstance(result, torch.nn.Module):
        return result.eval(), None
    if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        examples = result[1] if isinstance(result[1], tuple) else (result[1],)
        return result[0].eval(), tuple(t.detach().numpy() for t in examples)
    raise ModelLoadError(f"factory '{spec}' returned {type(result).__name__}",
                         where=str(recipe.path),
                         hint="return an nn.Module, or (nn.Module, example_inputs)")


def _load_exported(path: Path) -> torch.export.ExportedProgram:
    try:
        return torch.export.load(str(path))
    except Exception as exc:  # torch raises many kinds for a bad archive
        raise ModelLoadError(f"cannot load exported program: {exc}", where=str(path),
                             hint="save it with torch.export.save(program, 'model.pt2')") from None


def _samples(recipe: Recipe, examples: tuple[np.ndarray, ...] | None) -> tuple[np.ndarray, ...]:
    if recipe.samples:
        with np.load(recipe.resolve(recipe.samples), allow_pickle=False) as data:
            names = [s.name for s in recipe.inputs] or list(data.files)
            missing = [n for n in names if n not in data.files]
            if missing:
                raise ModelLoadError(f"samples file lacks inputs {missing} (has {data.files})",
                                     where=str(recipe.resolve(recipe.samples)))
            arrays = tuple(np.ascontiguousarray(data[n]) for n in names)
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


def _argument_names(model, count: int) -> tuple[str, ...]:
    if isinstance(model, torch.export.ExportedProgram):
        names = [s.arg.name for s in model.graph_signature.input_specs
                 if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    else:
        import inspect
        names = list(inspect.signature(model.forward).parameters)
    names = names[:count]
    return tuple(names) + tuple(f"input_{i}" for i in range(len(names), count))
