"""Inputs built into the module as constants (an axes input fixed by the recipe's `samples:`)
are recorded in the manifest, and a sample that passes another value for one is refused before
anything runs: by `validate` and by `deploy` (nothing uploaded). Real ONNX build, real
runtime, a device that is a directory."""

import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgekit import BuildOptions, build, validate_local
from edgekit.device.deploy import deploy_bundle
from edgekit.errors import BundleError
from edgekit.models.bundle import load_bundle
from tests.local.conftest import rehash, releases_on

# builds an ONNX model with the compiler: the integration tier, beside the local device it
# deploys to
pytestmark = pytest.mark.integration

REFUSAL = ("input 'axes' is [0] here, but the module was built with [1] folded in as a "
           "constant (it ignores what is passed)")


@pytest.fixture(scope="module")
def folded_bundle(tmp_path_factory):
    """ReduceSum over an `axes` graph input, built from samples that fix axes = [1]."""
    folder = tmp_path_factory.mktemp("folded")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    model = helper.make_model(helper.make_graph([node], "folded_axes", [x, axes], [y]),
                              opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(model, str(folder / "sum.onnx"))
    np.savez(folder / "s.npz", x=np.random.default_rng(0).random((2, 3, 4), np.float32),
             axes=np.array([1], np.int64))
    (folder / "r.yaml").write_text("name: folded\nmodel: {onnx: sum.onnx}\nsamples: s.npz\n")
    return build(BuildOptions(recipe=folder / "r.yaml", target="host", use_cache=False,
                              out=folder / "bundle")).bundle


def test_the_manifest_records_the_folded_value_and_its_own_samples_validate(folded_bundle):
    (folded,) = folded_bundle.manifest.folded_inputs
    assert (folded.name, folded.dtype, folded.shape, folded.values) == \
        ("axes", "int64", (1,), (1,))
    assert validate_local(folded_bundle.path).ok


def _with_axes_zero(bundle, tmp_path):
    copy = tmp_path / "edited"
    shutil.copytree(bundle.path, copy)
    axes_file = bundle.manifest.golden_inputs[1]
    np.save(copy / axes_file, np.array([0], np.int64))
    rehash(copy, axes_file)            # signed: a trusted signer's bundle, built wrong
    return load_bundle(copy), axes_file


def test_validate_refuses_a_sample_that_disagrees_with_a_folded_input(folded_bundle, tmp_path):
    edited, axes_file = _with_axes_zero(folded_bundle, tmp_path)
    with pytest.raises(BundleError) as refused:
        validate_local(edited.path)
    assert refused.value.what == f"{axes_file}: {REFUSAL}"
    assert refused.value.exit_code == 6


def test_deploy_refuses_it_before_uploading_anything(folded_bundle, tmp_path, make_device):
    edited, _ = _with_axes_zero(folded_bundle, tmp_path)
    device = make_device()
    with pytest.raises(BundleError, match="module was built with \\[1\\] folded in"):
        deploy_bundle(device, edited)
    assert releases_on(device.root, "folded") == set()
