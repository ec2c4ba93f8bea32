"""`edgekit fleet check-outputs`: a device's validation outputs, compared on the controller
with a release's golden outputs (what the exported Ansible playbook runs after fetching them).

Every validation sample of the release is compared, as `edgekit deploy` does (one report: each
output's worst sample). The outputs come as the tar the playbook's install step packs on the
device (`sample_<k>/output_<i>.npy|.bin`, and `sample_<k>.err`, run.sh's stderr, for a sample
that failed) or as a directory of the same layout (sample 0 may also lie flat in it). The
archive comes from the device, which is not trusted: only the names expected here are read,
regular files only, each bounded by the size its golden output implies; nothing is extracted
by the archive's own paths.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from edgekit.models.bundle import Bundle, load_bundle
from edgekit.models.report import ValidationReport
from edgekit.validate.compare import compare_output_files
from edgekit.validate.outputs import output_file
from edgekit.validate.samples import worst_per_output

ERR_BYTES = 4096              # of run.sh's stderr, the tail is what the report shows
HEADER_SLACK = 64 * 1024      # an .npy header beyond the golden file's


def check_outputs(release: Path, outputs: Path) -> ValidationReport:
    """Compare `outputs` (a tar or a directory) with the golden outputs of the release
    directory `release` (verified first: sha256 of every file)."""
    with load_bundle(release) as bundle:
        bundle.verify()
        where = outputs.parent.name if outputs.is_file() else outputs.name
        with tempfile.TemporaryDirectory(prefix="edgekit-outputs-") as tmp:
            folder = outputs
            problem = None
            if outputs.is_file():
                folder = Path(tmp)
                problem = _unpack(outputs, _expected(bundle), folder)
            return _compare(bundle, folder, where, problem)


def _samples(bundle: Bundle) -> list[tuple[str, ...]]:
    m = bundle.manifest
    return [m.golden_outputs, *(s.outputs for s in m.more_golden)]


def _expected(bundle: Bundle) -> dict[str, int]:
    """The archive's names → the most bytes each may hold."""
    m = bundle.manifest
    names = {}
    for k, golden in enumerate(_samples(bundle)):
        names[f"sample_{k}.err"] = ERR_BYTES * 16
        for i, (sig, path) in enumerate(zip(m.outputs, golden)):
            names[f"sample_{k}/{output_file(i, sig.dtype)}"] = \
                bundle.file(path).stat().st_size + HEADER_SLACK
    return names


def _unpack(archive: Path, expected: dict[str, int], into: Path) -> str | None:
    """Copy the expected members of `archive` into `into`; a problem with the archive as a
    whole (unreadable), else None. Unexpected or oversized members are not copied (their
    outputs then count as missing)."""
    try:
        with tarfile.open(archive, mode="r:") as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                limit = expected.get(name)
                if limit is None or not member.isfile() or member.size > limit:
                    continue
                source = tar.extractfile(member)
                if source is None:
                    continue
                (into / name).parent.mkdir(parents=True, exist_ok=True)
                (into / name).write_bytes(source.read(limit))
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"the outputs archive {archive.name} is unreadable ({exc})"
    return None


def _compare(bundle: Bundle, folder: Path, where: str, problem: str | None
             ) -> ValidationReport:
    m = bundle.manifest
    reports = []
    for k, golden in enumerate(_samples(bundle)):
        sample = folder / f"sample_{k}"
        if k == 0 and not sample.is_dir():
            sample = folder
        files = [sample / output_file(i, sig.dtype) for i, sig in enumerate(m.outputs)]
        report = compare_output_files(bundle, files, where=where, golden_outputs=golden)
        why = problem or _run_error(folder / f"sample_{k}.err")
        if why and not report.ok:
            report = report.model_copy(update={"outputs": tuple(
                c.model_copy(update={"problems": (why, *c.problems)}) if not c.ok else c
                for c in report.outputs)})
        reports.append(report)
    return worst_per_output(reports)


def _run_error(err: Path) -> str | None:
    if not err.is_file():
        return None
    lines = err.read_bytes()[-ERR_BYTES:].decode(errors="replace").strip().splitlines()
    tail = "".join(ch if ch.isprintable() else "?" for ch in (lines[-1:] or [""])[0])[:300]
    return f"iree-run-module failed on the device: {tail or 'no message'}"
