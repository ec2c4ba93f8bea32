"""`edgekit build MODEL.onnx|MODEL.pt2 --target T`: a build without a recipe, as `tvmc compile
model.onnx` takes one. edgekit writes the recipe it builds from beside the bundles
(`build/<name>.recipe.yaml`), so the next step — samples, quantization, tolerances — is an edit
of a file that already works, and `deploy --recipe` can name it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from edgekit.errors import ConfigError

SOURCES = {".onnx": "onnx", ".pt2": "exported"}
GENERATED = "# written by `edgekit build {model}`: edit it (samples, quantize, validation), or\n" \
            "# remove it to have it written again\n"


@dataclass(frozen=True)
class ModelRecipe:
    path: Path
    written: bool          # False: a recipe written earlier for this model, used as it is


def app_name(model: Path) -> str:
    """The recipe's name (the app's name on devices) from the file's: the characters a name
    may hold, at most 64."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", model.stem).strip("-._")[:64]
    return name if name and name[0].isalnum() else f"model-{name}".rstrip("-")[:64]


def recipe_for_model(model: Path, out: Path | None = None) -> ModelRecipe:
    """The recipe for a model file: written beside where the bundle goes (the folder of `out`,
    else `build/`) unless one written for the same model is there; one naming another model
    is never overwritten."""
    kind = SOURCES.get(model.suffix.lower())
    if kind is None:
        raise ConfigError(f"{model}: edgekit builds a model file ending in .onnx or .pt2 "
                          "without a recipe", key="model",
                          hint="for a PyTorch model in Python, write a recipe with "
                               "`model: {python: file.py:factory}` and pass --recipe")
    if not model.is_file():
        raise ConfigError(f"{model}: no such model file (working directory {Path.cwd()})",
                          key="model")
    name = app_name(model)
    folder = out.parent if out is not None else Path("build")
    path = folder / f"{name}.recipe.yaml"
    source = {kind: os.path.relpath(model.resolve(), folder.resolve())}
    if path.is_file():
        if _model_of(path) == source:
            return ModelRecipe(path, written=False)
        raise ConfigError(f"{path} exists and names another model", key="model",
                          hint=f"pass --recipe {path} to build what it names, or --out "
                               "elsewhere for this model")
    folder.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump({"name": name, "model": source}, sort_keys=False)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(GENERATED.format(model=model.name) + text)
    tmp.replace(path)
    return ModelRecipe(path, written=True)


def _model_of(path: Path) -> dict | None:
    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return loaded.get("model") if isinstance(loaded, dict) else None
