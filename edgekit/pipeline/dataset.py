"""A bundle's dataset gate (`validation.dataset`): its samples and labels written as golden/
files (uploaded, signed and sha256-verified with the release, so the device runs them from the
release's own directory) and the reference score recorded in the manifest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from edgekit.config.recipe import DatasetGate
from edgekit.models.bundle import Manifest, sha256_file
from edgekit.models.dataset import DatasetNote


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
