"""Accuracy gates run on the device after golden-output validation and before activation
(issue 38): determinism (`validation.repeat`) and the dataset score (`validation.dataset`).
The rules are pure and live in edgekit/validate/; this module runs the shim (runs.sh), fetches
the outputs — bounded, read as the manifest declares them (device answers are untrusted) — and
raises ValidationFailed (exit 8) with one line."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgekit.device import layout
from edgekit.device.releases import journal_event, scratch_token
from edgekit.errors import EdgekitError, RemoteCommandFailed, ValidationFailed
from edgekit.models.bundle import Bundle
from edgekit.transport.base import Transport
from edgekit.validate.determinism import first_disagreement
from edgekit.validate.dataset import drop, refusal, score
from edgekit.validate.outputs import output_byte_cap, output_file, read_output, static_nbytes
from edgekit.validate.tolerance import output_limits

RUN_TIMEOUT_S = 600.0       # one batch of runs (R runs of one sample, or one dataset batch)


def run_gates(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
              shims: str, on_stage: Callable[[str], None] = lambda _: None,
              dataset: bool = True) -> dict:
    """Every accuracy gate the bundle's manifest asks for; returns what they measured (for
    the deploy result); `dataset`: run the dataset gate (a fleet's later waves skip it unless
    the bundle says `everywhere`). Raises ValidationFailed (exit 8) — after journaling
    `rejected` — on the first gate that refuses the release."""
    m = bundle.manifest
    measured: dict = {}
    try:
        if m.tolerances.repeat > 1:
            on_stage(f"determinism: {m.tolerances.repeat} runs per sample")
            measured["repeat"] = check_determinism(conn, bundle, release_dir, runtime, shims)
        if m.dataset is not None and (dataset or m.dataset.everywhere):
            on_stage(f"dataset: {m.dataset.count} samples, {m.dataset.metric}")
            measured["dataset"] = check_dataset(conn, bundle, release_dir, runtime, shims)
    except ValidationFailed:
        journal_event(conn, m.app, "rejected", release_dir.rsplit("/", 1)[-1])
        raise
    return measured


def _goldens(bundle: Bundle) -> list[list[np.ndarray]]:
    m = bundle.manifest
    sets = [m.golden_outputs, *(s.outputs for s in m.more_golden)]
    return [[read_output(bundle.file(g), sig.dtype) for sig, g in zip(m.outputs, golden)]
            for golden in sets]


def check_determinism(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                      shims: str) -> dict:
    """Run each validation sample `validation.repeat` times on the device (runs.sh repeat:
    one remote command per sample) and refuse the release when any run's outputs differ from
    the others' beyond the output's tolerance: names sample, run, output, worst difference."""
    m = bundle.manifest
    repeat = m.tolerances.repeat
    goldens = _goldens(bundle)
    names = [sig.name for sig in m.outputs]
    lims = [output_limits(m.tolerances, sig.name, str(g.dtype))
            for sig, g in zip(m.outputs, goldens[0])]
    with tempfile.TemporaryDirectory(prefix="edgekit-repeat-") as scratch:
        for sample, golden in enumerate(goldens):
            out_dir = layout.validation_dir(m.app, scratch_token())
            try:
                _runs(conn, shims, runtime, release_dir, out_dir,
                      ["repeat", str(sample), str(repeat)],
                      f"the determinism gate's runs of sample {sample}")
                limits = [(output_byte_cap(g.nbytes), g.shape) for g in golden]
                runs = [_fetch(conn, f"{out_dir}/{r}", Path(scratch) / f"{sample}-{r}",
                               bundle, limits, "of a repeated run") for r in range(repeat)]
            finally:
                _remove(conn, out_dir)
            found = first_disagreement(sample, runs, names, lims)
            if found is not None:
                raise ValidationFailed(
                    f"not deterministic on {conn.where}: {found.describe(repeat)}; the release "
                    f"was not activated", report=None,
                    hint="the device's runtime or driver computes this module differently "
                         "from run to run: try another target (driver) for this device, or "
                         "loosen the tolerance only if the differences are rounding")
    return {"runs": repeat, "samples": len(goldens), "deterministic": True}


def _fetch(conn: Transport, remote: str, local: Path, bundle: Bundle,
           limits: list[tuple[int, tuple]], what: str) -> list[np.ndarray]:
    """One run's outputs, each fetched no larger than its (byte cap, shape) says and read as
    the manifest declares its dtype; an unreadable one refuses the release."""
    local.mkdir(parents=True, exist_ok=True)
    arrays = []
    for i, (sig, (cap, shape)) in enumerate(zip(bundle.manifest.outputs, limits)):
        name = output_file(i, sig.dtype)
        conn.get(f"{remote}/{name}", local / name, max_bytes=cap)
        try:
            arrays.append(read_output(local / name, sig.dtype, tuple(shape)))
        except (ValueError, EOFError, OSError) as exc:
            raise RemoteCommandFailed(
                f"output {name} {what} came back unreadable ({exc}); the release was not "
                f"activated", where=conn.where, argv=["runs.sh", name], returncode=1,
                stderr_tail="") from None
    return arrays


def _runs(conn: Transport, shims: str, runtime: str, release_dir: str, out_dir: str,
          args: list[str], what: str) -> None:
    """runs.sh on the device (one command, one process per run); a failure is the deploy's."""
    result = conn.run(["sh", f"{shims}/runs.sh", runtime, release_dir, out_dir, *args],
                      check=False, timeout=RUN_TIMEOUT_S)
    if result.returncode != 0:
        raise RemoteCommandFailed(f"{what} failed on the device; the release was not activated",
                                  where=conn.where, argv=["runs.sh", *args[:1]],
                                  returncode=result.returncode,
                                  stderr_tail=result.stderr[-2000:].decode(errors="replace"))


def _remove(conn: Transport, path: str) -> None:
    try:
        conn.run(["rm", "-rf", "--", path], check=False)
    except EdgekitError:
        pass     # best effort: the next deploy's clean_leftovers removes what remains


BATCH = 64        # dataset samples per remote command (one round trip each)


def check_dataset(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                  shims: str) -> dict:
    """Run the bundle's labelled set on the device (runs.sh dataset: BATCH samples a command,
    inputs from the verified release), fetch the outputs (each no larger than the manifest's
    static size says), score them here and refuse the release when the score drops more than
    `max_drop` below the reference the build measured (one line: metric, reference, measured,
    drop)."""
    m = bundle.manifest
    note = m.dataset
    if note is None:
        return {}
    measured = dataset_score(conn, bundle, release_dir, runtime, shims)
    refused = refusal(note.metric, note.reference_score, measured, note.max_drop)
    # in the device's journal: `fleet status` shows the score of the release it validated
    journal_event(conn, m.app, "scored", release_dir.rsplit("/", 1)[-1], {
        "metric": note.metric, "reference_score": note.reference_score,
        "measured": measured, "drop": drop(note.metric, note.reference_score, measured)})
    if refused:
        raise ValidationFailed(
            f"{refused} ({note.count} samples on {conn.where}); the release was not activated",
            report=None, hint="the build's accuracy on the device is below what its reference "
                              "reached: check the quantization's calibration data, or build "
                              "without quantization for this target")
    return {"metric": note.metric, "reference": note.reference,
            "reference_score": note.reference_score, "measured": measured,
            "drop": drop(note.metric, note.reference_score, measured), "samples": note.count}


def dataset_score(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                  shims: str) -> float:
    """The bundle's labelled set run on the device (runs.sh dataset: BATCH samples a command,
    inputs from the verified release at `release_dir`), its outputs fetched (each no larger
    than the manifest's static size says) and scored here; nothing journaled (the gate
    journals; `quantize search --host` scores releases it removes after)."""
    m = bundle.manifest
    note = m.dataset
    limits = [(_output_cap(sig), tuple(sig.shape)) for sig in m.outputs]
    labels = np.load(bundle.file(note.labels), allow_pickle=False)
    outputs: list[list[np.ndarray]] = []
    with tempfile.TemporaryDirectory(prefix="edgekit-dataset-") as scratch:
        for first in range(0, note.count, BATCH):
            count = min(BATCH, note.count - first)
            out_dir = layout.validation_dir(m.app, scratch_token())
            try:
                _runs(conn, shims, runtime, release_dir, out_dir,
                      ["dataset", f"{release_dir}/golden", str(first), str(count),
                       str(note.inputs)],
                      f"the dataset gate's samples {first}..{first + count - 1}")
                for i in range(first, first + count):
                    outputs.append(_as_declared(bundle, _fetch(
                        conn, f"{out_dir}/{i}", Path(scratch) / str(i), bundle, limits,
                        "of the dataset gate")))
            finally:
                _remove(conn, out_dir)
    return score(note.metric, outputs, labels)


def _output_cap(sig) -> int:
    nbytes = static_nbytes(tuple(sig.shape), sig.dtype)
    if nbytes is None:
        raise ValidationFailed(f"the dataset gate needs static output shapes; output "
                               f"'{sig.name}' is {tuple(sig.shape)}", report=None)
    return output_byte_cap(nbytes)


def _as_declared(bundle: Bundle, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The dataset's outputs as the manifest declares them (shape and dtype), else refused."""
    for i, (sig, array) in enumerate(zip(bundle.manifest.outputs, arrays)):
        if tuple(array.shape) != tuple(sig.shape) or str(array.dtype) != sig.dtype:
            raise ValidationFailed(
                f"dataset output {output_file(i, sig.dtype)} is {tuple(array.shape)} "
                f"{array.dtype}, the manifest declares {tuple(sig.shape)} {sig.dtype}; the "
                "release was not activated", report=None)
    return arrays
