"""`edgekit bisect --bundle`: the recipe and target a built bundle was made from, recovered
from its manifest, so bisect rebuilds the tapped variants the way that bundle was built.

The manifest records the model source (as the recipe wrote it), the model's digest, the target
profile as it decided the module's bytes, the lowering used, every iree-compile flag, the
quantization mode and the tolerances; the golden inputs are in the bundle. What it does not
hold is the model itself: that must still be on this machine, unchanged (its digest is checked
after export, by the caller), or bisect refuses and asks for --recipe."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from edgekit.config.profiles import load_target
from edgekit.errors import ConfigError
from edgekit.models.bundle import Bundle
from edgekit.toolchain import dispatch_sets, iree

HINT = "bisect from the recipe instead: edgekit bisect --recipe R --target T"


@dataclass(frozen=True)
class FromBundle:
    recipe: Path          # a recipe written into the work directory
    target: str           # a profile YAML path written there
    model_digest: str     # what the rebuilt model must hash to


def recover(bundle: Bundle, workdir: Path) -> FromBundle:
    """A recipe and target profile that rebuild `bundle`'s model as it was built; refuses in one
    line when the model source is not on this machine."""
    m = bundle.manifest
    where = str(bundle.path / "manifest.json")
    model = _model_source(m.model_source, where)
    target_path = workdir / f"{m.target}.yaml"
    target_path.write_text(yaml.safe_dump(m.target_profile, sort_keys=False))
    target = load_target(str(target_path))
    mode = m.quantization.mode if m.quantization else None
    if mode in ("int8", "int8-weights") and not model.get("onnx"):
        # PT2E calibration data is named in the recipe, not kept in the bundle
        raise ConfigError(f"the bundle is a {mode} build: its calibration data "
                          f"({m.quantization.calibration or 'unrecorded'}) is not in the bundle",
                          where=where, hint=HINT)
    base = iree.compile_flags(target, m.lowering.used, (), quantize_mode=mode)
    flags = tuple(m.compile_flags)
    if flags[:len(base)] != base:
        raise ConfigError(f"the bundle's compile flags do not start with what target "
                          f"'{m.target}' and lowering '{m.lowering.used}' give today "
                          "(another edgekit built it)", where=where, hint=HINT)
    extra = flags[len(base):]   # the recipe's own flags and a tuned variant's (tuning note)
    extra = _with_dispatch_configs(bundle, extra)
    samples = workdir / "golden.npz"
    np.savez(samples, **{s.name: np.load(bundle.file(p), allow_pickle=False)
                         for s, p in zip(m.inputs, m.golden_inputs)})
    doc = {"name": m.app, "model": model, "lowering": m.lowering.used,
           "compile": {"flags": list(extra)}, "samples": samples.name,
           "validation": m.tolerances.model_dump(mode="json", exclude_none=True)}
    if mode == "fp16":
        doc["quantize"] = {"mode": "fp16"}
    recipe = workdir / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
    return FromBundle(recipe, str(target_path), m.model_digest)


def _model_source(source: str, where: str) -> dict:
    """The recipe's `model:` for a recorded source, after checking it is here."""
    missing = None
    if source.endswith(".onnx"):
        kind = "onnx"
        missing = None if Path(source).is_file() else f"the ONNX file {source}"
    elif source.endswith((".pt2", ".pt")):
        kind = "exported"
        missing = None if Path(source).is_file() else f"the exported program {source}"
    else:
        kind = "python"
        module = source.rpartition(":")[0]
        if module.endswith(".py"):
            missing = None if Path(module).is_file() else f"the model file {module}"
        else:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            missing = None if found else f"the Python module {module}"
    if not source or missing:
        raise ConfigError(f"the bundle's model source is not on this machine: "
                          f"{missing or 'none recorded'}", where=where, hint=HINT)
    if kind != "python":
        source = str(Path(source).resolve())
    elif source.rpartition(":")[0].endswith(".py"):
        module, _, name = source.rpartition(":")
        source = f"{Path(module).resolve()}:{name}"
    return {kind: source}


def _with_dispatch_configs(bundle: Bundle, extra: tuple[str, ...]) -> tuple[str, ...]:
    """The bundle's tuned dispatch set, restored into this home (checked against its digest)
    and named as `--edgekit-dispatch-configs=<sha256>`: the recorded flag holds the path of
    the home that built it, which this machine may not have."""
    digest = bundle.manifest.dispatch_configs
    if not digest:
        return extra
    bundle.verify()
    dispatch_sets.restore(digest, bundle.dispatch_config_set(), str(bundle.path))
    return tuple(f"--edgekit-dispatch-configs={digest}" if dispatch_sets.digest_of_flags((f,))
                 == digest else f for f in extra)
