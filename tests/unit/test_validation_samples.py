"""Several validation samples: how they are drawn and how their reports combine."""

import numpy as np

from edgekit.models.report import OutputComparison, ValidationReport
from edgekit.pipeline.load import SAMPLE_SETS, more_like
from edgekit.validate.samples import worst_per_output


def comparison(error: float, ok: bool = True, problems=()):
    return OutputComparison(name="y", shape=(2,), max_abs_error=error, max_rel_error=error,
                            cosine=1.0, ok=ok, problems=problems)


def report(*outputs):
    return ValidationReport(app="a", target="host", where="host",
                            ok=all(o.ok for o in outputs), outputs=outputs, seconds=0.5)


def test_the_combined_report_fails_when_any_sample_fails_and_says_which():
    merged = worst_per_output([report(comparison(1e-6)), report(comparison(1e-7)),
                               report(comparison(0.5, False, ("max abs error 0.5",)))])
    assert not merged.ok and merged.samples == 3 and merged.seconds == 1.5
    assert merged.outputs[0].problems == ("sample 2: max abs error 0.5",)


def test_when_all_pass_each_output_shows_its_largest_error():
    merged = worst_per_output([report(comparison(1e-6)), report(comparison(3e-6))])
    assert merged.ok and merged.outputs[0].max_abs_error == 3e-6


def test_more_samples_are_distinct_and_like_the_example():
    ids = np.array([[3, 9, 4]], dtype=np.int64)
    x = np.random.default_rng(0).normal(0, 1, (4, 8)).astype(np.float32)
    mask = np.ones((1, 3), dtype=bool)
    more = more_like((x, ids, mask), np.random.default_rng(1))
    assert len(more) == SAMPLE_SETS - 1
    for mx, mids, mmask in more:
        assert mx.dtype == np.float32 and mx.shape == x.shape and not np.array_equal(mx, x)
        assert mids.dtype == np.int64 and mids.min() >= 3 and mids.max() <= 9
        assert mmask is mask
    assert not np.array_equal(more[0][0], more[1][0])
