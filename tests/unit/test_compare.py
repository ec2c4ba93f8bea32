import numpy as np

from edgekit.config.recipe import Tolerance
from edgekit.toolchain.iree import failing_ops
from edgekit.validate.compare import compare_output

TOL = Tolerance(atol=1e-4, rtol=1e-3, min_cosine=0.999)


def test_outputs_within_tolerance_pass_with_their_figures():
    expected = np.linspace(-1, 1, 20, dtype=np.float32).reshape(2, 10)
    result = compare_output("out", expected + 1e-6, expected, TOL)
    assert result.ok and result.max_abs_error < 2e-6 and result.cosine > 0.999999
    assert result.top1_agreement == 1.0


def test_nan_outputs_fail_even_where_the_rest_matches():
    expected = np.ones((1, 8), np.float32)
    actual = expected.copy()
    actual[0, 3] = np.nan
    result = compare_output("out", actual, expected, TOL)
    assert not result.ok
    assert any("non-finite" in p for p in result.problems)


def test_a_changed_arg_max_fails_top1_for_logits():
    expected = np.array([[0.1, 0.5, 0.2]], np.float32)
    actual = np.array([[0.1, 0.5, 0.6]], np.float32)
    result = compare_output("logits", actual, expected, Tolerance(atol=1, rtol=1, min_cosine=0))
    assert result.top1_agreement == 0.0 and not result.ok


def test_top1_is_not_applied_to_vectors_unless_asked():
    expected = np.arange(5, dtype=np.float32)
    assert compare_output("v", expected, expected, TOL).top1_agreement is None


def test_a_shape_mismatch_fails_clearly():
    result = compare_output("o", np.zeros((2, 3)), np.zeros((3, 2)), TOL)
    assert not result.ok and "shape" in result.problems[0]


def test_error_beyond_atol_plus_rtol_fails():
    expected = np.full((4,), 10.0, np.float32)
    result = compare_output("o", expected + 0.1, expected, TOL)
    assert not result.ok and "atol" in result.problems[0]


def test_compiler_diagnostics_name_the_failing_ops():
    text = ("loc(x): error: failed to legalize operation 'torch.aten.atan2' that was explicitly "
            "marked illegal\nerror: 'tosa.custom' op is not supported")
    assert failing_ops(text) == ("torch.aten.atan2", "tosa.custom")
