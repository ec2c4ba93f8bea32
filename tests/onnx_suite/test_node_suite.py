"""The ONNX backend node test suite (onnx.backend.test) through edgekit as an ONNX backend, for
`host`: every 12th case, each in a forked child (bench/onnx_backend_suite.py's runner).

A ratchet, not a pass rate: `passing.txt` lists the cases of this sample that passed when it was
written; one of them failing now fails CI, with its stage, op and reason. Cases that pass now
but are not on the list are reported; regenerate the list with

    python3 bench/onnx_backend_suite.py --sample 12 --paths edgekit \
        --ratchet-out tests/onnx_suite/passing.txt
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

from bench.onnx_backend_suite import read_ratchet

SAMPLE = 12
RATCHET = Path(__file__).with_name("passing.txt")


def test_no_case_on_the_ratchet_fails_and_every_failure_says_why(tmp_path):
    # The runner forks a child per case: from a fresh process, as a user runs it. Forked from
    # this test session (whose earlier tests started runtime and torch threads), a child can
    # inherit a lock held by a thread that does not exist in it, and hang.
    out = tmp_path / "suite.json"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(root / "bench" / "onnx_backend_suite.py"), "--sample", str(SAMPLE),
         "--paths", "edgekit", "--jobs", str(os.cpu_count() or 1), "--timeout", "180",
         "--quiet", "--json", str(out)],
        capture_output=True, text=True, timeout=1500,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    passing = read_ratchet(RATCHET)
    assert len(results) == len(set(r["case"] for r in results)) > 100
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
