"""A tapped variant of a model: built for the target through `edgekit build`'s BACK stages and
cache key, and run where the user's build runs (this machine, or a device through the trial
machinery that `tune` and `--compare-quantization` use: uploaded, validated, never activated,
removed afterwards)."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.device.trial import trial_on_device
from edgekit.errors import ToolError
from edgekit.models.bundle import Bundle, QuantizationNote, load_bundle
from edgekit.pipeline.build import BACK, BackContext, build_key, cache_slot, recipe_origin
from edgekit.pipeline.cache import BuildCache
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import TorchFrontend
from edgekit.pipeline.package import BundleIdentity
from edgekit.pipeline.stages import run_plan
from edgekit.toolchain import iree
from edgekit.toolchain.runner import scratch_dir
from edgekit.validate.outputs import output_file, read_output
from edgekit.validate.tolerance import with_build_defaults

_TORCH = TorchFrontend()


@dataclass(frozen=True)
class Built:
    bundle: Bundle
    reference: tuple[np.ndarray, ...]       # what the build is held to (a quantized build:
                                            # its quantized reference), per output
    fp32: tuple[np.ndarray, ...]            # the float model's values (eager), per output
    quantization: QuantizationNote | None


def exported_module(module: torch.nn.Module, samples: tuple[np.ndarray, ...],
                    names: tuple[str, ...]) -> ExportedModel:
    """`module` exported on one sample; its golden outputs from running it eagerly."""
    args = tuple(torch.from_numpy(np.array(s)) for s in samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # torch's own pytree deprecations
        program = torch.export.export(module, args)
    return _TORCH.exported(program, module, tuple(samples), names, [s.shape for s in samples])


def build_variant(recipe: Recipe, target: Target, exported: ExportedModel, label: str,
                  say: Callable[[str], None] = lambda _: None) -> Built:
    """Quantize `exported` as the recipe asks, then lower and compile it for `target` with the
    recipe's lowering and flags (cached under its own key)."""
    fp32 = exported.golden
    if recipe.quantize is not None:
        say(f"{label}: quantizing ({recipe.quantize.mode})")
        # the recipe's accuracy floor is for the model's outputs: a tap's quantization error
        # is what the profile shows, not a reason to stop
        floorless = recipe.model_copy(update={"quantize": recipe.quantize.model_copy(
            update={"min_cosine": None})})
        exported = exported.frontend.quantize(floorless, exported)
    mode = exported.quantization.mode if exported.quantization else None
    key = build_key({"kind": "edgekit bisect", "what": label, **recipe_origin(recipe)},
                    target, exported)
    cache = BuildCache()
    slot = cache_slot(cache, key)     # another home's entry is not ours to use
    entry = cache.lookup(slot)
    if entry is None:
        say(f"{label}: compiling for {target.name}")

        def identity(quantization: QuantizationNote | None) -> BundleIdentity:
            return BundleIdentity(app=f"{recipe.name}-bisect", model_source=recipe.source,
                                  recipe_digest="", build_key=key,
                                  tolerances=with_build_defaults(recipe.validation, mode))
        workdir = Path(tempfile.mkdtemp(prefix="edgekit-bisect-"))
        try:
            ctx = BackContext(target, recipe.lowering, recipe.compile.flags, identity, workdir,
                              workdir / "bundle", reproducer_dir=workdir / "reproducer")
            bundle = run_plan(BACK, ctx, exported, timings={})
            entry = cache.store(slot, bundle.path)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return Built(load_bundle(entry), exported.golden, fp32, exported.quantization)


def copy_bundle(bundle: Bundle, out: Path) -> Bundle:
    """The (cached) bundle copied to `out`, for a reproducer the user keeps."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(bundle.path, out)
    return load_bundle(out)


def run_here(bundle: Bundle) -> list[np.ndarray]:
    """The bundle's outputs on its golden inputs, computed by this machine's IREE runtime."""
    m = bundle.manifest
    with scratch_dir("bisect") as scratch:
        paths = [scratch / output_file(i, s.dtype) for i, s in enumerate(m.outputs)]
        iree.run_module(bundle.module, m.runtime_driver, m.entry_function,
                        [bundle.file(p) for p in m.golden_inputs], paths)
        return [read_output(p, s.dtype) for p, s in zip(paths, m.outputs)]


def run_on_device(bundles: list[Bundle], host: str, identity: Path | None,
                  say: Callable[[str], None] = lambda _: None) -> tuple[str, list[list]]:
    """(the device's address, each bundle's outputs on its golden inputs, computed there)."""
    with trial_on_device(host, identity, bundles, say, keep_outputs=True) as trial:
        found = []
        for bundle, kept in zip(bundles, trial.outputs):
            count = len(bundle.manifest.outputs)
            missing = [i for i in range(count) if (0, i) not in kept]
            if missing:   # the run failed there: its problems say why
                raise ToolError(f"the tapped module did not run on {trial.address}: "
                                f"{trial.problems[len(found)]}", argv=["run.sh"],
                                returncode=1, stderr_tail="")
            found.append([kept[(0, i)] for i in range(count)])
        return trial.address, found
