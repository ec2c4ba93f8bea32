"""edgekit as an ONNX backend (onnx.backend.base.Backend): prepare builds through the real
pipeline for host and validates; run calls the module; outputs keep the graph's dtypes; a model
edgekit cannot build is one EdgekitError line with its exit code, never a foreign exception."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edgekit.api.onnx_backend import EdgekitBackend
from edgekit.errors import EdgekitError


def one_node(op, dtype, shape=(2, 3), **attrs):
    node = helper.make_node(op, ["x", "y"], ["z"], **attrs)
    graph = helper.make_graph([node], f"one_{op}",
                              [helper.make_tensor_value_info(n, dtype, shape) for n in "xy"],
                              [helper.make_tensor_value_info("z", dtype, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_uint8_model_runs_and_returns_uint8():
    model = one_node("Add", TensorProto.UINT8)
    x = np.array([[200, 1, 2], [3, 4, 250]], np.uint8)
    y = np.array([[50, 1, 2], [3, 4, 5]], np.uint8)
    rep = EdgekitBackend.prepare(model)
    try:
        (z,) = rep.run([x, y])
    finally:
        rep.close()
    assert z.dtype == np.uint8
    np.testing.assert_array_equal(z, x + y)   # wraps like numpy's uint8 (250 + 5 = 255)
    assert rep.bundle.manifest.lowering.used == "torch"   # IREE's own ONNX input first


def test_the_onnx_backend_api_runs_a_model():
    model = one_node("Mul", TensorProto.FLOAT)
    x, y = np.float32([[1, 2, 3], [4, 5, 6]]), np.float32([[2, 2, 2], [0.5, 0.5, 0.5]])
    (z,) = EdgekitBackend.run_model(model, [x, y])
    np.testing.assert_allclose(z, x * y)
    assert EdgekitBackend.supports_device("CPU") and not EdgekitBackend.supports_device("CUDA")


def test_a_model_edgekit_cannot_build_is_one_edgekit_error():
    # LpPool: torch-mlir's ONNX importer (IREE's too) has no conversion for it
    node = helper.make_node("LpPool", ["x"], ["z"], kernel_shape=[2], p=3)
    graph = helper.make_graph([node], "lppool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    with pytest.raises(EdgekitError) as failed:
        EdgekitBackend.prepare(model)
    assert failed.value.exit_code in (3, 4) and "LpPool" in str(failed.value)
    assert "\n" not in failed.value.what


def test_a_model_whose_input_sets_a_shape_is_built_on_its_first_run_inputs():
    node = helper.make_node("Reshape", ["x", "shape"], ["z"])
    graph = helper.make_graph([node], "reshape",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["a", "b"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rep = EdgekitBackend.prepare(model)   # random `shape` values would mean nothing: deferred
    assert rep.bundle is None
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    try:
        (z,) = rep.run([x, np.array([3, 4], np.int64)])
    finally:
        rep.close()
    np.testing.assert_array_equal(z, x.reshape(3, 4))
