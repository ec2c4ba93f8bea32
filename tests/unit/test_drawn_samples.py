"""Samples edgekit draws beside a user's one `samples:` set, and the note for an input that
never varies (pure logic; the builds that use them: tests/integration/test_user_samples.py)."""

import numpy as np

from edgekit.config.recipe import Recipe
from edgekit.pipeline.load import SAMPLE_SETS, coverage_notes, more_samples_for


def recipe(**extra) -> Recipe:
    return Recipe.model_validate({"name": "r", "model": {"python": "m.py:f"}, **extra})


def test_one_user_sample_set_gets_more_drawn_like_it_and_kept_inputs_stay():
    x = np.random.default_rng(0).random((2, 4), np.float32)
    axes = np.array([1], np.int64)
    more = more_samples_for(recipe(samples="s.npz"), (x, axes), keep=(1,))
    assert len(more) == SAMPLE_SETS - 1
    for mx, maxes in more:
        assert mx.shape == x.shape and not np.array_equal(mx, x)
        assert maxes is axes


def test_an_input_the_same_everywhere_in_every_sample_is_named_and_a_varying_one_not():
    ones = np.ones((1, 5), bool)
    ids = np.array([[3, 3, 3]]), np.array([[3, 4, 3]])
    notes = coverage_notes(("mask", "ids"), [(ones, ids[0]), (ones, ids[1])])
    assert len(notes) == 1 and notes[0].startswith("input 'mask' is True everywhere")
    assert coverage_notes(("one",), [(np.array([7]),)]) == ()   # one value: nothing to vary
