"""How ONNX inputs come in, as pure logic: types, graph names, what an input means to the graph,
sample files (graphs made with onnx.helper; nothing compiled or run)."""

import typing

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from edgekit.config.recipe import DType, InputSpec
from edgekit.errors import ModelLoadError
from edgekit.pipeline.frontends.onnx_samples import (fit_to_roles, input_roles,
                                                     refuse_contradicting_samples)
from edgekit.pipeline.frontends.onnx_source import element_dtype, onnx_inputs
from edgekit.pipeline.load import as_declared, numpy_dtype, random_array, read_npz


def graph(nodes, inputs, outputs=(), initializers=()):
    return helper.make_model(helper.make_graph(
        nodes, "g", inputs, list(outputs) or [helper.make_tensor_value_info("y", T.FLOAT, None)],
        initializer=list(initializers)), opset_imports=[helper.make_opsetid("", 18)])


def info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_every_recipe_dtype_is_one_numpy_knows_and_onnx_maps_back():
    for name in typing.get_args(DType):
        assert numpy_dtype(name).name == name
    for elem in (T.UINT16, T.INT16, T.UINT32, T.UINT64, T.DOUBLE, T.BFLOAT16, T.FLOAT8E4M3FN,
                 T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ, T.BOOL):
        assert element_dtype(elem, "input 'x'", "m.onnx") in typing.get_args(DType)


@pytest.mark.parametrize("elem, why", [(T.INT4, "several to a byte"), (T.UINT4, "to a byte"),
                                       (T.STRING, "no string"), (T.COMPLEX64, "complex")])
def test_types_edgekit_cannot_take_are_refused_naming_the_input(elem, why):
    with pytest.raises(ModelLoadError, match=f"input 'w' is of type .*{why}"):
        element_dtype(elem, "input 'w'", "m.onnx")


def test_sequence_and_optional_inputs_are_refused_naming_them():
    seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, [2])
    with pytest.raises(ModelLoadError, match="input 's' is a sequence"):
        onnx_inputs(graph([], [seq]))
    optional = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(T.FLOAT, [2])))
    with pytest.raises(ModelLoadError, match="input 'o' is an optional"):
        onnx_inputs(graph([], [optional]))


def test_graph_names_are_valid_input_names():
    assert InputSpec(name="gpu_0/data_0", shape=(1, 3)).name == "gpu_0/data_0"
    with pytest.raises(ValueError):
        InputSpec(name="bad\nname", shape=(1,))


def test_indices_axes_divisors_and_shapes_are_recognised_where_the_graph_reads_them():
    model = graph([helper.make_node("Gather", ["table", "ids"], ["g"], axis=1),
                   helper.make_node("GatherND", ["table", "coords"], ["n"]),
                   helper.make_node("ReduceSum", ["table", "axes"], ["r"]),
                   helper.make_node("Div", ["q", "d"], ["v"]),
                   helper.make_node("Reshape", ["table", "shape"], ["y"]),
                   helper.make_node("Reshape", ["table", "fixed"], ["z"])],
                  [info("table", T.FLOAT, [4, 7]), info("ids", T.INT64, [3]),
                   info("coords", T.INT64, [5, 2]), info("axes", T.INT64, [1]),
                   info("q", T.INT32, [6]), info("d", T.INT32, [6]),
                   info("shape", T.INT64, [2])],
                  initializers=[numpy_helper.from_array(np.array([7, 4]), "fixed")])
    roles = input_roles(model)
    assert {n: r.kind for n, r in roles.items()} == {
        "ids": "index", "coords": "index", "axes": "axes", "d": "nonzero", "shape": "shape"}
    rng = np.random.default_rng(0)
    drawn = {"table": np.zeros((4, 7), np.float32),
             "ids": rng.integers(0, 100, 3), "coords": rng.integers(0, 100, (5, 2)),
             "axes": np.array([5]), "q": np.arange(6, dtype=np.int32),
             "d": np.zeros(6, np.int32)}
    fitted = fit_to_roles(model, drawn, roles, rng)
    assert fitted["ids"].max() < 7 and fitted["ids"].dtype == np.int64      # axis 1 has 7
    assert fitted["coords"][:, 0].max() < 4 and fitted["coords"][:, 1].max() < 7
    assert 0 <= fitted["axes"][0] < 2
    assert (fitted["d"] != 0).all() and fitted["d"].dtype == np.int32


def test_scatter_indices_are_distinct_along_the_scattered_axis():
    model = graph([helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=0)],
                  [info("data", T.FLOAT, [6, 3]), info("idx", T.INT64, [6, 3]),
                   info("upd", T.FLOAT, [6, 3])])
    rng = np.random.default_rng(1)
    fitted = fit_to_roles(model, {"idx": np.zeros((6, 3), np.int64)}, input_roles(model), rng)
    for column in fitted["idx"].T:
        assert sorted(column) == list(range(6))


def test_ml_dtypes_samples_come_back_from_a_npz_as_declared_and_0_d_stays_0_d(tmp_path):
    bf16 = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    np.savez(tmp_path / "s.npz", b=bf16, k=np.float32(3.0))
    data = read_npz(tmp_path / "s.npz", "samples")
    assert data["k"].shape == ()
    assert as_declared(data["b"], "bfloat16").dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(as_declared(data["b"], "bfloat16"), bf16)


def test_random_arrays_have_the_dtype_asked_for():
    rng = np.random.default_rng(0)
    for name in typing.get_args(DType):
        array = random_array(name, (2, 3), rng)
        assert array.dtype == numpy_dtype(name) and array.shape == (2, 3)


def test_outputs_edgekit_cannot_read_back_are_refused_naming_them():
    from edgekit.pipeline.frontends.onnx_source import check_outputs
    model = graph([helper.make_node("Cast", ["x"], ["y"], to=T.INT4)],
                  [info("x", T.FLOAT, [2])], [info("y", T.INT4, [2])])
    with pytest.raises(ModelLoadError, match="output 'y' is of type int4"):
        check_outputs(model)
    for elem in (T.UINT16, T.BFLOAT16, T.FLOAT8E5M2):
        check_outputs(graph([], [info("x", elem, [2])], [info("x", elem, [2])]))


def test_raw_outputs_are_read_back_with_the_manifests_dtype_and_shape(tmp_path):
    from edgekit.validate.outputs import output_file as output_name, read_output as read_array
    assert output_name(0, "bfloat16") == "output_0.bin"
    assert output_name(1, "float32") == "output_1.npy"
    values = np.array([[1.5, -2.0, 0.25]], dtype=ml_dtypes.bfloat16)
    values.tofile(tmp_path / "output_0.bin")
    np.testing.assert_array_equal(read_array(tmp_path / "output_0.bin", "bfloat16", (1, 3)),
                                  values)
    np.save(tmp_path / "g.npy", values.view("V2"))
    assert read_array(tmp_path / "g.npy", "bfloat16").dtype == ml_dtypes.bfloat16


def test_an_index_that_reaches_its_indexer_through_an_unsqueeze_is_still_an_index():
    # NegativeLogLikelihoodLoss expanded: target [N] → Unsqueeze → GatherElements on [N, C]
    model = graph([helper.make_node("Unsqueeze", ["target", "one"], ["t"]),
                   helper.make_node("GatherElements", ["scores", "t"], ["y"], axis=1)],
                  [info("scores", T.FLOAT, [3, 5]), info("target", T.INT64, [3])],
                  initializers=[numpy_helper.from_array(np.array([1]), "one")])
    rng = np.random.default_rng(0)
    fitted = fit_to_roles(model, {"target": np.full(3, 50)}, input_roles(model), rng)
    assert fitted["target"].max() < 5


def test_onnxruntime_messages_lose_their_cpp_source_line_and_signature():
    from edgekit.pipeline.frontends.onnx_source import _line
    raw = ("[ONNXRuntimeError] : 1 : FAIL : Load model from m.onnx failed:/onnxruntime_src/"
           "onnxruntime/core/graph/model.cc:256 onnxruntime::Model::Model(onnx::ModelProto&&, "
           "const onnxruntime::ModelOptions&) Unsupported model IR version: 14, max supported "
           "IR version: 13\n")
    assert _line(RuntimeError(raw)) == "Unsupported model IR version: 14, max supported IR " \
                                       "version: 13"
    ran = ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while "
           "running Gather node. Name:'' Status Message: indices element out of data bounds")
    assert _line(RuntimeError(ran)) == "Gather: indices element out of data bounds"


def test_an_invalid_old_model_is_called_invalid_not_unconvertible(tmp_path):
    import onnx

    from edgekit.pipeline.frontends.onnx_source import load_onnx
    # TopK has two outputs: this graph is wrong whatever its opset
    model = helper.make_model(helper.make_graph(
        [helper.make_node("TopK", ["x"], ["y"], k=1)], "g", [info("x", T.FLOAT, [2, 4])],
        [info("y", T.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 9)], ir_version=4)
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(ModelLoadError, match="invalid ONNX model"):
        load_onnx(tmp_path / "m.onnx")


def test_an_old_opset_is_upgraded_and_said(tmp_path):
    import onnx

    from edgekit.pipeline.frontends.onnx_source import UPGRADE_TO, load_onnx, opset_of
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [info("x", T.FLOAT, [2])],
        [info("y", T.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 9)], ir_version=4)
    onnx.save(model, str(tmp_path / "m.onnx"))
    notes: list[str] = []
    assert opset_of(load_onnx(tmp_path / "m.onnx", notes)) == UPGRADE_TO
    assert notes == [f"opset 9 upgraded to {UPGRADE_TO} by onnx.version_converter"]


def test_a_float8_e5m2_sample_numpy_cannot_read_back_is_read_as_declared(tmp_path):
    values = np.array([0.5, -2.0, 3.0], dtype=ml_dtypes.float8_e5m2)
    np.savez(tmp_path / "s.npz", f=values)       # written with descr '<f1'
    data = read_npz(tmp_path / "s.npz", "samples")
    np.testing.assert_array_equal(as_declared(data["f"], "float8_e5m2"), values)


def test_made_up_inputs_giving_another_output_shape_than_declared_ask_for_samples():
    # ReduceSum over an `axes` input, its output declared (3, 1, 2): axes=[0] contradicts it
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 2, 2]),
                                            helper.make_tensor_value_info("axes", T.INT64, [1])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [3, 1, 2])])
    model = helper.make_model(graph)
    right, wrong = (np.zeros((3, 1, 2), np.float32),), (np.zeros((1, 2, 2), np.float32),)
    refuse_contradicting_samples(model, ("axes",), [right, right], "m.onnx")
    refuse_contradicting_samples(model, (), [wrong], "m.onnx")   # the user's own samples
    with pytest.raises(ModelLoadError) as refused:
        refuse_contradicting_samples(model, ("axes",), [right, wrong], "m.onnx")
    assert "input(s) 'axes' give output 'y' the shape (1, 2, 2) where the model declares " \
           "(3, 1, 2)" in str(refused.value)
    assert "`samples:`" in refused.value.hint


def test_a_float8_zero_point_is_made_up_as_zero_and_an_int8_one_stays_random():
    node = helper.make_node("DequantizeLinear", ["x", "s", "zp"], ["y"])
    inputs = [helper.make_tensor_value_info("x", T.FLOAT8E4M3FN, [5]),
              helper.make_tensor_value_info("s", T.FLOAT, []),
              helper.make_tensor_value_info("zp", T.FLOAT8E4M3FN, [1])]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", T.FLOAT, [5])])
    model = helper.make_model(graph)
    roles = input_roles(model)
    rng = np.random.default_rng(0)
    f8 = np.full(1, 0.5, ml_dtypes.float8_e4m3fn)
    fitted = fit_to_roles(model, {"x": np.ones(5, ml_dtypes.float8_e4m3fn), "zp": f8}, roles, rng)
    assert fitted["zp"].dtype == f8.dtype and float(fitted["zp"][0]) == 0.0
    int8 = np.full(1, 3, np.int8)
    assert fit_to_roles(model, {"zp": int8}, roles, rng)["zp"][0] == 3


def test_an_opset_too_old_to_convert_is_kept_when_its_ops_are_defined_as_today(tmp_path):
    import onnx

    from edgekit.pipeline.frontends.onnx_source import load_onnx, opset_of

    def saved(op, name):
        model = helper.make_model(helper.make_graph(
            [helper.make_node(op, ["x"], ["y"])], "g", [info("x", T.BOOL, [2])],
            [info("y", T.BOOL, [2])]), opset_imports=[helper.make_opsetid("", 1)], ir_version=3)
        onnx.save(model, str(tmp_path / name))
        return tmp_path / name
    notes: list[str] = []
    assert opset_of(load_onnx(saved("Not", "not.onnx"), notes)) == 1   # Not: unchanged since 1
    assert notes and notes[0].startswith("opset 1 kept")
    with pytest.raises(ModelLoadError, match="opset 1 is older than 7"):
        load_onnx(saved("Identity", "identity.onnx"))   # Identity: redefined at 13, 14, …


def test_an_index_that_reaches_its_indexer_through_a_where_branch_is_still_an_index():
    # NegativeLogLikelihoodLoss expanded with ignore_index: Where(target == ii, 0, target)
    model = graph([helper.make_node("Equal", ["target", "ii"], ["is_ii"]),
                   helper.make_node("Where", ["is_ii", "zero", "target"], ["t"]),
                   helper.make_node("GatherElements", ["scores", "t"], ["y"], axis=1)],
                  [info("scores", T.FLOAT, [3, 5]), info("target", T.INT64, [3, 1])],
                  initializers=[numpy_helper.from_array(np.array(1), "ii"),
                                numpy_helper.from_array(np.array(0), "zero")])
    rng = np.random.default_rng(0)
    fitted = fit_to_roles(model, {"target": np.full((3, 1), 50)}, input_roles(model), rng)
    assert fitted["target"].max() < 5
