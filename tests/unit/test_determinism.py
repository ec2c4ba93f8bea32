"""The determinism rule (validate/determinism.py): runs are compared with the majority, the odd
run is named with its output and worst difference, and a one-in-20 flake is caught at R = 64."""

import numpy as np
import pytest

from edgekit.validate.determinism import caught_at_least, escape_probability, first_disagreement
from edgekit.validate.tolerance import F32_DEFAULTS, Limits

LIM = Limits(*F32_DEFAULTS, top1="auto", exact=False, rule="test")
RNG = np.random.default_rng(0)
OUT = RNG.standard_normal((1, 12)).astype(np.float32)


def runs_with(odd: dict[int, float], count: int = 8) -> list[list[np.ndarray]]:
    runs = []
    for r in range(count):
        out = OUT.copy()
        out[0, 3] += odd.get(r, 0.0)
        runs.append([out])
    return runs


def test_runs_that_agree_within_the_tolerance_pass():
    assert first_disagreement(0, runs_with({2: 1e-6}), ["logits"], [LIM]) is None


def test_the_odd_run_is_named_with_its_output_and_worst_difference():
    found = first_disagreement(2, runs_with({5: 0.5}), ["logits"], [LIM])
    assert (found.sample, found.run, found.output, found.reference_run) == (2, 5, "logits", 0)
    assert found.worst == pytest.approx(0.5, rel=1e-5)
    assert found.describe(8).startswith("sample 2, run 5 of 8: output 'logits' differs from "
                                        "run 0 (worst difference 0.5;")


def test_an_odd_first_run_is_named_itself_not_every_other_run():
    found = first_disagreement(0, runs_with({0: 0.5}), ["logits"], [LIM])
    assert (found.run, found.reference_run) == (0, 1)


def test_a_nan_on_one_run_is_an_infinite_difference():
    runs = runs_with({})
    runs[3][0] = runs[3][0].copy()
    runs[3][0][0, 0] = np.nan
    found = first_disagreement(0, runs, ["logits"], [LIM])
    assert found.run == 3 and found.worst == float("inf")


def test_one_call_in_20_escapes_64_runs_of_3_samples_almost_never():
    # the kws bundle has 3 validation samples: 192 calls per deploy
    assert escape_probability(1 / 20, 64 * 3) < 1e-4
    assert caught_at_least(19, 20, 1 / 20, 64 * 3) > 0.9999
    # one sample alone: 64 calls escape 3.7 % of the time; 19 of 20 deploys: 83 %
    assert escape_probability(1 / 20, 64) == pytest.approx(0.0375, abs=1e-3)
    assert caught_at_least(19, 20, 1 / 20, 64) == pytest.approx(0.83, abs=0.01)


def test_the_rule_catches_a_simulated_one_in_20_flake_in_19_of_20_deploys():
    """The rule itself over 20 simulated deploys (3 samples × 64 runs, each call corrupted
    with probability 1/20)."""
    rng = np.random.default_rng(38)
    caught = 0
    for _ in range(20):
        for sample in range(3):
            hits = {r: 1.0 for r in range(64) if rng.random() < 1 / 20}
            if first_disagreement(sample, runs_with(hits, 64), ["logits"], [LIM]):
                caught += 1
                break
    assert caught >= 19
