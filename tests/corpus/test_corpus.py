"""The model corpus: each real architecture builds for the host and for a Raspberry Pi 4 and
its module matches eager PyTorch on held-out inputs (the Pi's under qemu, arm64 userland)."""

import pytest

from tests.corpus.harness import build_and_compare
from tests.corpus.models import CORPUS

# fp32 end to end: differences are reassociation only
RELATIVE_TOLERANCE = 1e-4


@pytest.mark.parametrize("target", ["host", "rpi4"])
@pytest.mark.parametrize("entry", CORPUS, ids=[e.name for e in CORPUS])
def test_each_architecture_builds_and_matches_eager_on_held_out_inputs(entry, target, tmp_path,
                                                                       arm64_userland):
    outcome = build_and_compare(entry, target, tmp_path)
    assert outcome.scale > 0, f"{entry.name}: eager outputs are all zero; nothing is compared"
    assert outcome.max_abs_error <= RELATIVE_TOLERANCE * max(1.0, outcome.scale), outcome
    assert outcome.lowering in ("tosa", "linalg", "torch")
    # a lowering that failed first says which op, where in the model and why, in one line
    for attempt in outcome.attempts:
        assert "loc(" not in attempt and len(attempt) < 400, attempt
