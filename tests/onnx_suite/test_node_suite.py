"""The ONNX backend node test suite (onnx.backend.test) through edgekit as an ONNX backend, for
`host`: every 12th case, each in a forked child (bench/onnx_backend_suite.py's runner).

A ratchet, not a pass rate: `passing.txt` lists the cases of this sample that passed when it was
written; one of them failing now fails CI, with its stage, op and reason. Cases that pass now
but are not on the list are reported; regenerate the list with

    python3 bench/onnx_backend_suite.py --sample 12 --paths edgekit \
        --ratchet-out tests/onnx_suite/passing.txt
"""

import os
import warnings
from pathlib import Path

from bench.onnx_backend_suite import collect_cases, read_ratchet, run_all

SAMPLE = 12
RATCHET = Path(__file__).with_name("passing.txt")


def test_no_case_on_the_ratchet_fails_and_every_failure_says_why():
    cases = collect_cases()[::SAMPLE]
    passing = read_ratchet(RATCHET)
    results = run_all(cases, ("edgekit",), jobs=os.cpu_count() or 1, timeout=180,
                      target="host")
    assert len(results) == len(cases)
    newly = sorted(r["case"] for r in results if r["ok"] and r["case"] not in passing)
    if newly:
        warnings.warn(f"{len(newly)} ONNX node case(s) pass that {RATCHET.name} does not list "
                      f"({', '.join(newly[:20])}); regenerate it (see this module's docstring)",
                      stacklevel=1)
    regressed = [r for r in results if not r["ok"] and r["case"] in passing]
    assert not regressed, "cases on the ratchet fail now:\n" + "\n".join(
        f"  {r['case']}: {r['stage']}: {r['op']}: {r.get('reason', '')}" for r in regressed)
    silent = [r["case"] for r in results if not r["ok"] and not r.get("reason")]
    assert not silent, f"failures without a message: {silent}"
