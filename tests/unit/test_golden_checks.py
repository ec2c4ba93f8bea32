"""Golden outputs that prove nothing are refused (validate/golden.py)."""

import numpy as np
import pytest

from edgekit.config.recipe import Validation
from edgekit.errors import UninformativeGolden, ValidationFailed
from edgekit.validate.golden import check_golden, uninformative_reason
from edgekit.validate.tolerance import output_limits

RNG = np.random.default_rng(0)


def reason(*per_sample, validation=Validation(), inputs_differ=True):
    lim = output_limits(validation, "y", str(per_sample[0].dtype))
    return uninformative_reason(list(per_sample), lim, inputs_differ)


@pytest.mark.parametrize("array, why", [
    (np.zeros((1, 1000), np.float32), "all 1000 values are 0"),
    (np.full((2, 10), 0.1, np.float32), "all 20 values are 0.1"),
    (np.full((4,), np.nan, np.float32), "all 4 values are NaN"),
    (np.array([np.nan, np.inf]), "all 2 values are NaN/Inf"),
    (np.zeros((3,), np.int64), "all 3 values are 0"),
    (np.full((3,), 7, np.int32), "all 3 values are 7"),
    (np.zeros((5,), bool), "all 5 values are False"),
    (np.zeros((), np.float32), "its one value is 0"),
])
def test_outputs_that_prove_nothing_and_why(array, why):
    assert reason(array) == why


def test_constant_within_the_tolerance_is_constant():
    # a vanishing net: every value the same within 1e-8; a module returning 0.5 would pass
    values = (0.5 + RNG.normal(size=(1, 10)) * 1e-8).astype(np.float32)
    assert "within its tolerance" in reason(values)


@pytest.mark.parametrize("array", [
    RNG.normal(size=(1, 10)).astype(np.float32), np.array([3.0], np.float32),
    np.zeros((0, 4), np.float32), np.array([np.nan, 1.0, 2.0]), np.array([0, 1], np.int8),
    np.array([True, False]), np.array([[1, 3, 224, 224]], np.int64),
])
def test_outputs_that_tell_modules_apart_pass(array):
    assert reason(array) is None


def test_the_same_output_for_different_samples_proves_nothing():
    same = RNG.normal(size=(1, 10)).astype(np.float32)
    assert "same for all 3 validation samples" in reason(same, same.copy(), same + 1e-9)
    assert reason(same, same.copy(), inputs_differ=False) is None
    assert reason(same, same * 2) is None


def test_constant_on_one_sample_is_fine_when_another_sample_informs():
    assert reason(np.zeros(4, np.float32), np.arange(4, dtype=np.float32)) is None
    assert reason(np.zeros(4, np.float32), np.ones(4, np.float32)) == \
        "all 4 values are 0 on every sample"


def test_check_golden_refuses_in_one_line_naming_the_output():
    golden = [(RNG.normal(size=(2, 3)).astype(np.float32), np.zeros((2, 10), np.float32))]
    with pytest.raises(UninformativeGolden) as err:
        check_golden(Validation(), ["features", "logits"], golden, where="r.yaml")
    assert isinstance(err.value, ValidationFailed) and err.value.exit_code == 8
    assert err.value.output == "logits"
    assert err.value.what == ("golden output 'logits' cannot tell a right module from a wrong "
                              "one: all 20 values are 0")
    assert "\n" not in err.value.what and "accept_uninformative: [logits]" in err.value.hint


@pytest.mark.parametrize("accept", [True, ("logits",)])
def test_the_recipe_accepts_it_knowingly_per_output_or_all(accept):
    golden = [(np.zeros((2, 10), np.float32), RNG.normal(size=(3,)))]
    check_golden(Validation(accept_uninformative=accept), ["logits", "other"], golden)
    with pytest.raises(UninformativeGolden):
        check_golden(Validation(accept_uninformative=("other",)), ["logits", "other"], golden)


def test_identical_inputs_do_not_count_as_distinct_samples():
    x = np.ones((1, 4), np.float32)
    out = RNG.normal(size=(1, 3)).astype(np.float32)
    check_golden(Validation(), ["y"], [(out,), (out,)], inputs=[(x,), (x.copy(),)])
    with pytest.raises(UninformativeGolden, match="same for all 2"):
        check_golden(Validation(), ["y"], [(out,), (out,)], inputs=[(x,), (x + 1,)])


def test_the_recipe_key_takes_true_or_output_names(write_recipe):
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    base = 'model:\n  python: "@TINY@:mlp"\nvalidation:\n  accept_uninformative: '
    names = load_recipe(write_recipe(base + "[logits, mask]\n")).validation
    assert names.accepts_uninformative("mask") and not names.accepts_uninformative("y")
    assert load_recipe(write_recipe(base + "true\n")).validation.accepts_uninformative("y")
    assert not Validation().accepts_uninformative("y")
    with pytest.raises(ConfigError, match="accept_uninformative"):
        load_recipe(write_recipe(base + "{logits: 1}\n"))


@pytest.mark.parametrize("validation, key", [
    (Validation(accept_uninformative=("logit",)), "validation.accept_uninformative"),
    (Validation(outputs={"output_1": {"atol": 1}}), "validation.outputs"),
])
def test_a_name_that_is_no_output_is_a_config_error(validation, key):
    from edgekit.errors import ConfigError
    golden = [(RNG.normal(size=(2, 3)).astype(np.float32),)]
    with pytest.raises(ConfigError) as err:
        check_golden(validation, ["output_0"], golden, where="r.yaml")
    assert err.value.key == key and err.value.hint == "the outputs are: output_0"
    assert err.value.exit_code == 2
