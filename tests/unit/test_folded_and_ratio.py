"""Pure logic: folded inputs held against samples (validate/folded.py) and the module's error
as a multiple of eager float32's (validate/compare.py)."""

import numpy as np
import pytest

from edgekit.models.bundle import TensorSig
from edgekit.models.report import OutputComparison
from edgekit.validate.compare import with_float32_ratios
from edgekit.validate.folded import (disagreement, first_disagreement, folded_input,
                                     folded_value)

SIGS = (TensorSig(name="x", shape=(2, 3), dtype="float32"),
        TensorSig(name="axes", shape=(1,), dtype="int64"))
AXES = folded_input("axes", np.array([1], np.int64))
X = np.zeros((2, 3), np.float32)


def test_a_folded_value_round_trips_through_the_manifest_record():
    shape = folded_input("shape", np.array([[2, 3], [4, 5]], np.int32))
    value = folded_value(shape)
    assert value.dtype == np.int32 and value.tolist() == [[2, 3], [4, 5]]
    assert folded_input("s", np.array(7, np.int64)).shape == ()


@pytest.mark.parametrize("given, shown", [(np.array([0], np.int64), "[0]"),
                                          (np.array([1, 2], np.int64), "[1, 2]"),
                                          (np.array(1, np.int64), "1")])
def test_a_sample_with_another_value_or_shape_disagrees_in_one_line(given, shown):
    why = disagreement((AXES,), SIGS, (X, given))
    assert why == (f"input 'axes' is {shown} here, but the module was built with [1] folded "
                   "in as a constant (it ignores what is passed)")


def test_the_same_value_or_no_such_input_agrees():
    assert disagreement((AXES,), SIGS, (X, np.array([1], np.int32))) is None  # value, not type
    assert disagreement((AXES,), SIGS, (X,)) is None          # a set without it: not judged
    assert disagreement((), SIGS, (X, np.array([0]))) is None
    found = first_disagreement((AXES,), SIGS, [("sample 0", (X, np.array([1]))),
                                               ("sample 1", (X, np.array([2])))])
    assert found is not None and found[0] == "sample 1"


def _comparison(error: float) -> OutputComparison:
    return OutputComparison(name="o", shape=(4,), max_abs_error=error, max_rel_error=0.0,
                            ok=True)


class _Manifest:
    def __init__(self, eager):
        self.float32_error = eager


def test_the_ratio_is_the_modules_error_over_eager_float32s():
    (c,) = with_float32_ratios([_comparison(3.0)], _Manifest((2.0,)))
    assert c.float32_ratio == 1.5
    # no float64 reference, eager exact, or a failed output: no ratio
    for eager, error in (((), 3.0), ((0.0,), 3.0), ((2.0,), float("inf"))):
        (c,) = with_float32_ratios([_comparison(error)], _Manifest(eager))
        assert c.float32_ratio is None
