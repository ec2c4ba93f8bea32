"""edgekit: take a PyTorch model to edge devices and prove, on each, that it runs correctly.

Every CLI command is a Python function here::

    from edgekit import BuildOptions, build, validate_local
    result = build(BuildOptions(recipe=Path("recipes/kws_mlp.yaml"), target="host"))
    report = validate_local(result.bundle.path)
"""

import importlib as _importlib

# name → the module that defines it. Imported on first use: `import edgekit` (and so every CLI
# command, `edgekit --help` included) must not pay for torch, torch-mlir and IREE up front.
_EXPORTS: dict[str, str] = {
    "Bundle": "edgekit.models.bundle",
    "BuildOptions": "edgekit.api.build",
    "BuildResult": "edgekit.api.build",
    "EdgekitError": "edgekit.errors",
    "Recipe": "edgekit.config.recipe",
    "Target": "edgekit.config.profiles",
    "available_targets": "edgekit.config.profiles",
    "build": "edgekit.api.build",
    "load_bundle": "edgekit.models.bundle",
    "load_recipe": "edgekit.config.recipe",
    "load_target": "edgekit.config.profiles",
    "validate_local": "edgekit.validate.local",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'edgekit' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__")})

