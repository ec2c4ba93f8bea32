"""Output comparison (validate/compare.py) and per-dtype tolerances (validate/tolerance.py)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from edgekit.config.recipe import Tolerance, Validation
from edgekit.models.bundle import ReferenceSpread
from edgekit.toolchain.iree import failing_ops
from edgekit.validate.compare import classifier_shaped, compare_output, cosine
from edgekit.validate.outputs import as_declared, output_file, read_output
from edgekit.validate.tolerance import dtype_defaults, limits, output_limits, with_build_defaults

TOL = Tolerance(atol=1e-4, rtol=1e-3, min_cosine=0.999)


def test_outputs_within_tolerance_pass_with_their_figures():
    expected = np.linspace(-1, 1, 20, dtype=np.float32).reshape(2, 10)
    result = compare_output("logits", expected + 1e-6, expected, TOL)
    assert result.ok and result.max_abs_error < 2e-6 and result.cosine > 0.999999
    assert result.top1_agreement == 1.0 and result.dtype == "float32"


def test_a_nan_where_the_reference_has_a_number_fails():
    expected = np.ones((1, 8), np.float32)
    actual = expected.copy()
    actual[0, 3] = np.nan
    result = compare_output("out", actual, expected, TOL)
    assert not result.ok
    assert result.problems == ("NaN/Inf at 1 place(s) where the reference differs (first at "
                               "(0, 3): nan, expected 1)",)


def test_nan_and_inf_at_the_same_places_pass_and_errors_use_the_finite_rest():
    expected = np.array([np.nan, 1.0, np.inf, -np.inf, 2.0], np.float32)
    actual = np.array([np.nan, 1.00001, np.inf, -np.inf, 2.0], np.float32)
    result = compare_output("out", actual, expected, Tolerance())
    assert result.ok, result.problems
    assert result.max_abs_error == pytest.approx(1e-5, rel=0.1) and result.cosine > 0.9999


def test_inf_of_the_other_sign_fails():
    expected = np.array([np.inf, 1.0], np.float32)
    actual = np.array([-np.inf, 1.0], np.float32)
    assert "NaN/Inf" in compare_output("o", actual, expected, Tolerance()).problems[0]


def test_cosine_of_zero_vectors_is_undefined_not_one():
    zeros = np.zeros(8)
    assert cosine(zeros, zeros) is None
    assert cosine(zeros, np.ones(8)) is None
    assert cosine(np.array([1.0, 0]), np.array([0.0, 1])) == 0.0
    assert cosine(np.array([np.nan, 1.0]), np.array([np.nan, 2.0])) == pytest.approx(1.0)
    huge, tiny = np.array([1e300, -1e300]), np.array([1e-300, -1e-300])
    assert cosine(huge, huge) == pytest.approx(1.0) and cosine(tiny, -tiny) == pytest.approx(-1)


def test_zero_against_zero_is_judged_by_the_error_alone_and_reported_undefined():
    zeros = np.zeros((1, 10), np.float32)
    same = compare_output("o", zeros, zeros, Tolerance())
    assert same.ok and same.cosine is None
    noisy = compare_output("o", zeros + 1e-7, zeros, Tolerance())
    assert noisy.ok and noisy.cosine is None
    wrong = compare_output("o", zeros + 1.0, zeros, Tolerance())
    assert not wrong.ok and "exceeds atol" in wrong.problems[0]


def test_a_vanished_output_fails_by_its_error():
    expected = np.linspace(1, 2, 10, dtype=np.float32)
    result = compare_output("o", np.zeros_like(expected), expected, Tolerance())
    assert not result.ok and result.cosine is None and "exceeds atol" in result.problems[0]


def test_cosine_is_not_judged_on_a_reference_within_atol_of_zero():
    expected = np.array([1e-9, -1e-9, 2e-9], np.float32)
    actual = np.array([-3e-8, 2e-8, 1e-8], np.float32)   # noise, within atol
    assert compare_output("o", actual, expected, Tolerance()).ok


def test_a_changed_arg_max_fails_top1_for_logits():
    expected = np.array([[0.1, 0.5, 0.2]], np.float32)
    actual = np.array([[0.1, 0.5, 0.6]], np.float32)
    result = compare_output("logits", actual, expected,
                            Tolerance(atol=1, rtol=1, min_cosine=0))
    assert result.top1_agreement == 0.0 and not result.ok


@pytest.mark.parametrize("name, shape, expected", [
    ("logits", (1, 1000), True), ("class_scores", (4, 10), True), ("probs", (2, 3), True),
    ("output_0", (1, 384), False), ("sentence_embedding", (1, 384), False),
    ("pooler_output", (1, 768), False), ("last_hidden_state", (1, 7, 384), False),
    ("logits", (1, 3, 8, 8), False), ("logits", (4,), False), ("logits", (1, 1), False),
    ("hidden_logits", (1, 10), False),
])
def test_top1_auto_is_for_classifier_shaped_outputs_only(name, shape, expected):
    values = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    assert classifier_shaped(name, values) is expected


def test_softmax_and_log_softmax_rows_are_classifier_shaped_whatever_the_name():
    logits = np.random.default_rng(1).normal(size=(3, 7))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert classifier_shaped("output_0", probs.astype(np.float32))
    assert classifier_shaped("output_0", np.log(probs).astype(np.float32))
    assert not classifier_shaped("output_0", logits.astype(np.float32))
    assert not classifier_shaped("output_0", probs.astype(np.int32))


def test_top1_on_a_sentence_embedding_only_when_asked():
    emb = np.random.default_rng(2).normal(size=(1, 384)).astype(np.float32)
    assert compare_output("output_0", emb, emb, Tolerance()).top1_agreement is None
    always = compare_output("output_0", emb, emb, Tolerance(top1="always"))
    assert always.top1_agreement == 1.0
    never = compare_output("logits", emb, emb, Tolerance(top1="never"))
    assert never.top1_agreement is None


def test_a_shape_mismatch_fails_clearly():
    result = compare_output("o", np.zeros((2, 3)), np.zeros((3, 2)), TOL)
    assert result.problems == ("shape (2, 3), expected (3, 2)",)


def test_a_dtype_mismatch_fails_in_one_line():
    expected = np.arange(4, dtype=np.uint8)
    result = compare_output("y", expected.astype(np.int8), expected, Tolerance())
    assert not result.ok and result.problems == ("dtype int8, expected uint8",)
    wider = compare_output("y", expected.astype(np.float32), expected.astype(np.float16),
                           Tolerance())
    assert wider.problems == ("dtype float32, expected float16",)


def test_signless_integers_are_read_as_the_declared_dtype():
    # IREE returns a uint8 result of 200 + 100 (mod 256) as int8 44; -56 is uint8 200
    signless = np.array([101, 44, -56], np.int8)
    as_u8 = as_declared(signless, "uint8")
    assert as_u8.dtype == np.uint8 and as_u8.tolist() == [101, 44, 200]
    assert as_declared(np.array([1], np.int32), "uint32").dtype == np.uint32
    assert as_declared(np.array([1], np.int32), "int64").dtype == np.int32  # width differs
    assert as_declared(np.array([1], np.int8), "bool").dtype == np.int8
    assert as_declared(np.array([1.0], np.float16), "bfloat16").dtype == np.float16


def test_integers_and_bool_are_exact_and_name_the_first_difference():
    expected = np.array([[1, 2], [3, 4]], np.int64)
    actual = expected.copy()
    actual[1, 0] = 5
    result = compare_output("idx", actual, expected, Tolerance())
    assert result.problems == ("1 of 4 values differ (first at (1, 0): 5, expected 3)",)
    assert result.limits == "exact (int64: exact)"
    flags = np.array([True, False, True])
    assert compare_output("mask", flags, flags, Tolerance()).ok
    assert not compare_output("mask", ~flags, flags, Tolerance()).ok


def test_top_level_float_tolerances_do_not_loosen_integer_outputs():
    validation = Validation(atol=10, rtol=1)
    assert output_limits(validation, "idx", "int32").atol == 0
    assert output_limits(validation, "y", "float32").atol == 10
    own = Validation(outputs={"idx": Tolerance(atol=1)})
    lim = output_limits(own, "idx", "int32")
    assert lim.atol == 1 and lim.rtol == 0
    assert compare_output("idx", np.array([3], np.int32), np.array([2], np.int32), lim).ok


def test_per_output_entries_override_only_what_they_set():
    validation = Validation(atol=0.5, min_cosine=0.9, outputs={"b": Tolerance(atol=0.01)})
    a, b = output_limits(validation, "a", "float32"), output_limits(validation, "b", "float32")
    assert (a.atol, a.min_cosine) == (0.5, 0.9)
    assert (b.atol, b.min_cosine, b.rtol) == (0.01, 0.9, 1e-3)


def test_float16_and_bfloat16_defaults_scale_with_their_epsilon():
    f16, bf16, f32 = dtype_defaults("float16"), dtype_defaults("bfloat16"), dtype_defaults(
        "float32")
    assert f16[:2] == (8 * np.finfo(np.float16).eps,) * 2
    assert bf16[:2] == (8 * float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps),) * 2
    assert f32[:3] == (1e-4, 1e-3, 0.999)
    assert dtype_defaults("float8_e4m3fn")[:3] == (0.25, 0.25, 0.99)
    assert dtype_defaults("float64")[:3] == f32[:3]


def test_a_float16_output_a_few_ulps_off_passes_by_the_float16_rule_not_float32s():
    rng = np.random.default_rng(3)
    expected = rng.normal(size=(4, 64)).astype(np.float16)
    # 3 float16 ulps off everywhere: beyond float32's 1e-4 + 1e-3·|x|
    actual = (expected.astype(np.float32) * (1 + 3 * 2.0 ** -10)).astype(np.float16)
    assert compare_output("y", actual, expected, Tolerance()).ok
    assert not compare_output("y", actual.astype(np.float32), expected.astype(np.float32),
                              Tolerance()).ok
    assert not compare_output("y", actual, expected, Tolerance(atol=1e-4, rtol=1e-3)).ok


def test_bfloat16_outputs_compare():
    expected = np.linspace(-2, 2, 16).astype(ml_dtypes.bfloat16)
    assert compare_output("y", expected, expected, Tolerance()).ok
    off = (expected.astype(np.float32) + 0.5).astype(ml_dtypes.bfloat16)
    assert not compare_output("y", off, expected, Tolerance()).ok


def test_quantized_builds_fill_only_what_the_recipe_left_out():
    assert with_build_defaults(Validation(), None) == Validation()
    int8 = with_build_defaults(Validation(min_cosine=0.5), "int8")
    assert (int8.atol, int8.rtol, int8.min_cosine) == (1e-2, 1e-2, 0.5)
    assert output_limits(with_build_defaults(Validation(), "int8"), "i", "int64").atol == 0
    # an fp16 build's reference rounds as the module does: float32 outputs keep float32's rule
    fp16 = with_build_defaults(Validation(), "fp16")
    assert output_limits(fp16, "y", "float32").atol == 1e-4
    assert output_limits(fp16, "y", "float16").atol == 8 * 2.0 ** -10


def test_an_int8_reference_that_moves_in_another_order_widens_only_its_own_output():
    deep = ReferenceSpread(output="logits", cosine=0.9987, max_abs_error=0.044, runs="x")
    shallow = ReferenceSpread(output="aux", cosine=0.999999, max_abs_error=1e-3, runs="x")
    v = with_build_defaults(Validation(), "int8", (deep, shallow))
    logits = output_limits(v, "logits", "float32")
    assert logits.min_cosine == pytest.approx(1 - 2 * 0.0013) and logits.atol == 0.088
    assert logits.rtol == 1e-2
    aux = output_limits(v, "aux", "float32")         # within one step: the int8 defaults
    assert (aux.atol, aux.min_cosine) == (1e-2, 0.9999)
    # what the recipe says wins, top level or the output's own; only int8 builds widen
    assert output_limits(with_build_defaults(Validation(min_cosine=0.9999), "int8", (deep,)),
                         "logits", "float32").min_cosine == 0.9999
    own = Validation(outputs={"logits": Tolerance(atol=0.01)})
    kept = output_limits(with_build_defaults(own, "int8", (deep,)), "logits", "float32")
    assert kept.atol == 0.01 and kept.min_cosine < 0.998
    assert with_build_defaults(Validation(), "fp16", (deep,)) == Validation()


def test_the_reference_spread_of_a_quantized_cnn_is_measured_in_other_orders():
    import torch

    from edgekit.examples.models import SmallCNN
    from edgekit.pipeline.quantize.int8 import quantize_graph
    from edgekit.pipeline.quantize.spread import reference_spread
    torch.manual_seed(0)
    x = torch.rand(1, 3, 32, 32)
    graph = quantize_graph(torch.export.export(SmallCNN().eval(), (x,)).module(), [(x,)],
                           per_channel=True, weights_only=False)
    samples = [(x.numpy(),), (torch.rand(1, 3, 32, 32).numpy(),)]
    golden = [tuple(graph(*(torch.from_numpy(a) for a in s)).detach().numpy()[None])
              for s in samples]
    (spread,) = reference_spread(graph, samples, golden, ["logits"])
    assert spread.output == "logits" and 0.99 < spread.cosine <= 1.0
    assert spread.runs == "convolutions without oneDNN, channels-last images"
    # a wrong golden set is not "spread": it shows
    wrong = [tuple(-g for g in gs) for gs in golden]
    assert reference_spread(graph, samples, wrong, ["logits"])[0].cosine < 0


@pytest.mark.parametrize("array", [
    np.float32(3.5) * np.ones(()), np.zeros((0, 4), np.float32), np.zeros((2, 0), np.int64),
    np.array(True), np.ones((3,), bool), np.zeros((), np.int64),
])
def test_zero_d_empty_and_bool_outputs_compare_without_crashing(array):
    result = compare_output("o", array, array, Tolerance(top1="always"))
    assert result.ok, result.problems
    if array.size:
        bad = compare_output("o", (array + 1).astype(array.dtype) if array.dtype != bool
                             else ~array, array, Tolerance())
        assert not bad.ok


def test_error_beyond_atol_plus_rtol_fails():
    expected = np.full((4,), 10.0, np.float32)
    result = compare_output("o", expected + 0.1, expected, TOL)
    assert not result.ok and "atol" in result.problems[0]


def test_limits_say_which_rule_applied():
    assert limits(Tolerance(), "float16").describe().endswith("(float16 default: 8 eps)")
    assert "recipe: atol" in limits(Tolerance(atol=1), "float32").describe()


FLOAT_DTYPES = st.sampled_from([np.float16, np.float32, np.float64])
INT_DTYPES = st.sampled_from([np.int8, np.uint8, np.int32, np.int64, np.uint64, np.bool_])


@settings(max_examples=200, deadline=None, database=None)
@given(hnp.arrays(FLOAT_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                   max_side=5),
                  elements=st.floats(allow_nan=True, allow_infinity=True, width=16)),
       st.sampled_from(["auto", "always", "never"]))
def test_a_float_array_always_matches_itself_nan_and_inf_included(array, top1):
    result = compare_output("logits", array, array.copy(), Tolerance(top1=top1))
    assert result.ok, result.problems
    assert result.max_abs_error == 0.0


@settings(max_examples=100, deadline=None, database=None)
@given(hnp.arrays(INT_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                 max_side=5)))
def test_an_integer_or_bool_array_always_matches_itself(array):
    assert compare_output("o", array, array.copy(), Tolerance(top1="always")).ok


@settings(max_examples=100, deadline=None, database=None)
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, min_side=1,
                                                 max_side=6),
                  elements=st.floats(-1e6, 1e6)),
       st.floats(1e-3, 1e3))
def test_cosine_is_defined_in_minus_one_to_one_or_none(array, scale):
    value = cosine(array, array * scale)
    if np.any(array) and np.any(array * scale):   # a subnormal times 1e-3 is 0
        assert value == pytest.approx(1.0)
    else:
        assert value is None


def test_compiler_diagnostics_name_the_failing_ops():
    text = ("loc(x): error: failed to legalize operation 'torch.aten.atan2' that was explicitly "
            "marked illegal\nerror: 'tosa.custom' op is not supported")
    assert failing_ops(text) == ("torch.aten.atan2", "tosa.custom")


def test_dtypes_npy_cannot_carry_are_written_raw_and_read_as_declared(tmp_path):
    assert output_file(0, "uint8") == "output_0.npy"
    assert output_file(3, "bfloat16") == "output_3.bin"
    values = np.array([[1.5, -2.25, 3e-3]], ml_dtypes.bfloat16)
    values.tofile(tmp_path / "output_0.bin")
    got = read_output(tmp_path / "output_0.bin", "bfloat16", (1, 3))
    assert got.dtype == values.dtype and np.array_equal(got, values)
    with pytest.raises(ValueError, match="holds 3 bfloat16 values, expected 6"):
        read_output(tmp_path / "output_0.bin", "bfloat16", (2, 3))
    with pytest.raises(ValueError, match="static shape"):
        read_output(tmp_path / "output_0.bin", "bfloat16", ("n", 3))


def test_a_bfloat16_golden_saved_by_numpy_is_read_back_as_bfloat16(tmp_path):
    values = np.array([1.5, 2.0], ml_dtypes.bfloat16)
    np.save(tmp_path / "g.npy", values)       # numpy writes it as raw '<V2' records
    raw = np.load(tmp_path / "g.npy")
    assert raw.dtype.kind == "V"
    assert np.array_equal(as_declared(raw, "bfloat16"), values)
    assert as_declared(raw, "float32").dtype.kind == "V"    # another width: left for the check
