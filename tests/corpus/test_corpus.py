"""The model corpus: each real architecture builds and its module matches eager PyTorch on
held-out inputs — for the host or for a Raspberry Pi 4 (under qemu, arm64 userland).

CI builds each architecture once, the targets alternating (both targets and every family
covered, half the tier's time: it was ~10 % of the suite); `python3 bench/model_corpus.py`
builds the whole matrix, every architecture for both."""

import pytest

from tests.corpus.harness import build_and_compare
from tests.corpus.models import CORPUS

# fp32 end to end: differences are reassociation only
RELATIVE_TOLERANCE = 1e-4


TARGETS = ("host", "rpi4")
PAIRS = [(entry, TARGETS[i % len(TARGETS)]) for i, entry in enumerate(CORPUS)]


@pytest.mark.parametrize(("entry", "target"), PAIRS,
                         ids=[f"{e.name}-{t}" for e, t in PAIRS])
def test_each_architecture_builds_and_matches_eager_on_held_out_inputs(entry, target, tmp_path,
                                                                       userland_for):
    userland_for(target)
    outcome = build_and_compare(entry, target, tmp_path)
    assert outcome.scale > 0, f"{entry.name}: eager outputs are all zero; nothing is compared"
    assert outcome.max_abs_error <= RELATIVE_TOLERANCE * max(1.0, outcome.scale), outcome
    # under `lowering: auto`: TOSA first, and kept (f64, i64, wide groups legalised first)
    assert outcome.lowering == entry.lowering, outcome.attempts
    # a lowering that failed first says which op, where in the model and why, in one line
    for attempt in outcome.attempts:
        assert "loc(" not in attempt and len(attempt) < 400, attempt
