"""A manifest's further module functions (an LLM's `decode` beside its `main` prefill): a golden
set names the function it runs, the sample order is the entry function's sets first, and a set
naming a function the manifest does not declare is malformed."""

import copy

import pydantic
import pytest

from edgekit.models.bundle import Manifest
from tests.unit.test_hostile_inputs import MANIFEST_DOC

DECODE = {"name": "decode", "inputs": [{"name": "token", "shape": [1, 1], "dtype": "int64"}],
          "outputs": [{"name": "logits", "shape": [1, 1, 8], "dtype": "float32"}]}


def manifest(**changes) -> Manifest:
    doc = copy.deepcopy(MANIFEST_DOC)
    doc["files"].update({f"golden/{n}.npy": "5" * 64 for n in ("s1_i", "s1_o", "d1_i", "d1_o")})
    doc["more_golden"] = [{"inputs": ["golden/s1_i.npy"], "outputs": ["golden/s1_o.npy"]},
                          {"inputs": ["golden/d1_i.npy"], "outputs": ["golden/d1_o.npy"],
                           "function": "decode"}]
    doc["functions"] = [DECODE]
    doc.update(changes)
    return Manifest.model_validate(doc)


def test_each_sample_runs_the_function_its_set_names_the_entry_ones_first():
    assert manifest().sample_sets() == [
        ("main", ("golden/input_0.npy",), ("golden/output_0.npy",)),
        ("main", ("golden/s1_i.npy",), ("golden/s1_o.npy",)),
        ("decode", ("golden/d1_i.npy",), ("golden/d1_o.npy",))]


def test_a_set_that_runs_an_undeclared_function_is_malformed():
    with pytest.raises(pydantic.ValidationError, match="does not declare: decode"):
        manifest(functions=[])


@pytest.mark.parametrize("name", ["de code", "$(id)", "../x", "9decode"])
def test_a_function_name_is_a_plain_identifier(name):
    # it reaches a device's run.env as FUNCTION_<k>=name
    with pytest.raises(pydantic.ValidationError, match="functions.0.name"):
        manifest(functions=[dict(DECODE, name=name), DECODE])
