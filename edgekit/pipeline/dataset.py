"""A bundle's dataset gate (`validation.dataset`): its samples and labels written as golden/
files (uploaded, signed and sha256-verified with the release, so the device runs them from the
release's own directory) and the reference score recorded in the manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgekit.config.recipe import DatasetGate, Recipe
from edgekit.errors import ConfigError
from edgekit.models.bundle import Bundle, Manifest, load_bundle, sha256_file, write_manifest
from edgekit.models.dataset import DatasetNote
from edgekit.pipeline.export import ExportedModel
from edgekit.toolchain.signing import sign_bundle
from edgekit.validate.dataset import load_set, score
from edgekit.validate.folded import first_disagreement, folded_input


def with_dataset(directory: Path, manifest: Manifest, gate: DatasetGate,
                 samples: Sequence[tuple[np.ndarray, ...]], labels: np.ndarray,
                 reference_score: float) -> Manifest:
    """Write the set into the bundle at `directory`; the manifest that lists it (the caller
    writes and signs it)."""
    note = DatasetNote(count=len(samples), inputs=len(samples[0]), metric=gate.metric,
                       max_drop=gate.max_drop, reference=gate.reference,
                       reference_score=float(reference_score), everywhere=gate.everywhere)
    (directory / "golden").mkdir(exist_ok=True)
    files = dict(manifest.files)
    for i, sample in enumerate(samples):
        for rel, array in zip(note.sample_files(i), sample):
            np.save(directory / rel, np.ascontiguousarray(array))
            files[rel] = sha256_file(directory / rel)
    np.save(directory / note.labels, np.asarray(labels))
    files[note.labels] = sha256_file(directory / note.labels)
    return manifest.model_copy(update={"dataset": note, "files": files})


def attach_dataset(recipe: Recipe, bundle: Bundle, float_model: ExportedModel | None,
                   built: ExportedModel | None) -> Bundle:
    """The build's stage `dataset`: score the recipe's `validation.dataset` with the reference
    it names (fp32: the float model — for an ONNX QDQ model, `quantize.float_model` or the
    model with its activations' Q/DQ pairs removed; golden: the model the golden outputs come
    from, a quantized build's own), write the set and the score into the bundle and sign it
    again.
    A recipe without a dataset gate: the bundle as it is."""
    gate = recipe.validation.dataset
    if gate is None:
        return bundle
    where = str(recipe.path)
    samples, labels = load_set(recipe.resolve(gate.samples), recipe.resolve(gate.labels),
                               inputs=len(bundle.manifest.inputs), limit=gate.limit,
                               where=where)
    folded = built.folded if built is not None else ()
    found = first_disagreement(tuple(folded_input(n, v) for n, v in folded),
                               bundle.manifest.inputs,
                               ((f"sample {k}", s) for k, s in enumerate(samples)))
    if found is not None:   # the module ignores that input: the score would be of another model
        raise ConfigError(f"{found[0]}: {found[1]}", where=where,
                          key="validation.dataset.samples",
                          hint="give the dataset the value the recipe's `samples:` fix, or "
                               "build from samples of the dataset's value")
    model = float_model if gate.reference == "fp32" else built
    if model is None:
        raise ConfigError("the dataset gate's reference model is not available in this build",
                          where=where, key="validation.dataset.reference")
    try:
        reference = model.frontend.dataset_reference(recipe, model, gate.reference == "fp32")
        outputs = [reference(s) for s in samples]
    except NotImplementedError as exc:
        raise ConfigError(f"validation.dataset: {exc}", where=where,
                          key="validation.dataset",
                          hint="the dataset gate's reference score needs a PyTorch or an "
                               "ONNX model") from None
    reference_score = score(gate.metric, outputs, labels)
    manifest = with_dataset(bundle.path, bundle.manifest, gate, samples, labels,
                            reference_score)
    write_manifest(bundle.path, manifest)
    sign_bundle(bundle.path)
    return load_bundle(bundle.path)


def dataset_digests(recipe: Recipe) -> dict | None:
    """What the dataset gate adds to the build key: its files' sha256 (another set, another
    reference score, another bundle)."""
    gate = recipe.validation.dataset
    if gate is None:
        return None
    samples = recipe.resolve(gate.samples)
    files = sorted(samples.glob("*.npz")) if samples.is_dir() else [samples]
    labels = recipe.resolve(gate.labels)
    return {str(f.name): sha256_file(f) for f in [*files, labels] if f.is_file()}
