"""ONNX ops IREE cannot lower, expanded to the function bodies the spec defines for them, and
shape/axes inputs built in from the samples: the onnx package's own node cases (opset-23
Attention and the other function ops) through real onnx, onnxruntime, torch-mlir and IREE."""

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from edgekit import BuildOptions, build, validate_local
from edgekit.api.onnx_backend import build_model
from edgekit.pipeline.frontends.onnx_expand import (KNOWN_TO_FAIL, expand_functions,
                                                    fold_constants, unroll_scans)
from tests.integration.helpers import edgekit
from tests.integration.test_onnx_inputs import one_error, save

FUNCTION_CASES = (r"^test_(attention|rms_normalization|rotary_embedding|affine_grid|"
                  r"linear_attention|flexattention|causal_conv_with_state|swish|swiglu|sce|nllloss)")
# opset-23 Attention as models meet it: 3-D and 4-D, GQA, causal, a KV cache with empty
# optional inputs before it (onnx.inliner refuses those), softcap, a 3-D mask
BUILT = ("test_attention_3d", "test_attention_4d_gqa_causal_nonpad_decode",
         "test_attention_4d_causal_with_past_and_present", "test_attention_3d_softcap",
         "test_attention_4d_attn_mask_3d_causal")


def cases(pattern):
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases()
                if re.search(pattern, c.name) and "_expanded" not in c.name]


def run_as_backend(bundle, case, inputs):
    """The bundle's outputs on the case's inputs, run as the ONNX backend runner runs it."""
    from edgekit.api.onnx_backend import EdgekitRep, _with_graph_types
    rep = _with_graph_types(EdgekitRep(bundle, None), case.model)
    try:
        return tuple(np.array(o) for o in rep.run(inputs))   # copies: the runtime is released
    finally:
        rep.close()


def assert_like_expected(case, outputs):
    from onnx.backend.test.runner import Runner, _normalize_tensor
    expected = [_normalize_tensor(e) for e in case.data_sets[0][1]]
    Runner.assert_similar_outputs(expected, list(outputs), rtol=case.rtol, atol=case.atol)


def test_every_function_op_case_expanded_and_folded_gives_the_expected_outputs():
    from onnx.reference import ReferenceEvaluator
    found = cases(FUNCTION_CASES)
    assert len(found) > 60
    for case in found:
        model, expanded = expand_functions(case.model)
        model, _ = fold_constants(model)
        model, _ = unroll_scans(model)      # LinearAttention's body scans its sequence
        assert set(expanded) & KNOWN_TO_FAIL, case.name
        assert not {n.op_type for n in model.graph.node} & (KNOWN_TO_FAIL | {"Scan"}), case.name
        names = [i.name for i in case.model.graph.input]
        inputs = case.data_sets[0][0]
        assert_like_expected(case, ReferenceEvaluator(model).run(None, dict(zip(names, inputs))))


def test_a_model_without_such_ops_is_left_as_it_is():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"])], "s",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 23)])
    same, expanded = expand_functions(model)
    assert same is model and not expanded


def scan_model(opset=23):
    """A Scan with two states, one input scanned backwards along axis 1 and one forwards along
    axis 0, one scan output stacked along axis 1 in reverse (every attribute the unrolling
    reads)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "a"], ["s_out"]),
         helper.make_node("Mul", ["c_in", "b"], ["c_out"]),
         helper.make_node("Sub", ["s_out", "c_out"], ["y"])], "body",
        [helper.make_tensor_value_info("s_in", T.FLOAT, [2]),
         helper.make_tensor_value_info("c_in", T.FLOAT, [2]),
         helper.make_tensor_value_info("a", T.FLOAT, [2]),
         helper.make_tensor_value_info("b", T.FLOAT, [2])],
        [helper.make_tensor_value_info("s_out", T.FLOAT, [2]),
         helper.make_tensor_value_info("c_out", T.FLOAT, [2]),
         helper.make_tensor_value_info("y", T.FLOAT, [2])])
    scan = helper.make_node("Scan", ["s0", "c0", "xa", "xb"], ["s", "c", "ys"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 0],
                            scan_input_directions=[1, 0], scan_output_axes=[-1],
                            scan_output_directions=[1])
    return helper.make_model(helper.make_graph(
        [scan], "scan",
        [helper.make_tensor_value_info("s0", T.FLOAT, [2]),
         helper.make_tensor_value_info("c0", T.FLOAT, [2]),
         helper.make_tensor_value_info("xa", T.FLOAT, [2, 5]),
         helper.make_tensor_value_info("xb", T.FLOAT, [5, 2])],
        [helper.make_tensor_value_info("s", T.FLOAT, [2]),
         helper.make_tensor_value_info("c", T.FLOAT, [2]),
         helper.make_tensor_value_info("ys", T.FLOAT, [2, 5])]),
        opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize("opset", [11, 23])    # Unsqueeze's axes: an attribute, an input
def test_a_scan_of_static_length_unrolled_computes_what_the_scan_does(opset):
    from onnx.reference import ReferenceEvaluator
    model = scan_model(opset)
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.random(2, np.float32), "c0": rng.random(2, np.float32) + 1,
             "xa": rng.random((2, 5), np.float32), "xb": rng.random((5, 2), np.float32) + 0.5}
    flat, unrolled = unroll_scans(model)
    assert unrolled == {5: 1} and "Scan" not in {n.op_type for n in flat.graph.node}
    onnx.checker.check_model(flat, full_check=True)
    import onnxruntime as ort    # the reference evaluator scans forwards only
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ReferenceEvaluator(flat).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_scan_of_unknown_length_stays():
    model = scan_model()
    model.graph.input[2].type.tensor_type.shape.dim[1].dim_param = "n"
    same, unrolled = unroll_scans(model)
    assert not unrolled and "Scan" in {n.op_type for n in same.graph.node}


@pytest.mark.parametrize("name", ("test_linear_attention_gated_delta_gqa",
                                  "test_linear_attention_prefill_with_past"))
def test_linear_attention_builds_with_its_scan_unrolled(name, tmp_path):
    (case,) = cases(f"^{name}$")
    inputs = list(case.data_sets[0][0])
    bundle = build_model(case.model, "host", tmp_path, inputs)
    notes = bundle.manifest.model_notes
    assert any("LinearAttention ×1" in n for n in notes), notes
    assert any(n.startswith("Scan unrolled") for n in notes), notes
    assert validate_local(bundle.path).ok
    assert_like_expected(case, run_as_backend(bundle, case, inputs))


@pytest.mark.parametrize("name", BUILT)
def test_opset_23_attention_builds_for_host_and_gives_the_cases_outputs(name, tmp_path):
    (case,) = [c for c in cases(f"^{name}$")]
    inputs = list(case.data_sets[0][0])
    bundle = build_model(case.model, "host", tmp_path, inputs)
    assert any("expanded to their ONNX function bodies" in n and "Attention ×1" in n
               for n in bundle.manifest.model_notes), bundle.manifest.model_notes
    assert validate_local(bundle.path).ok
    assert_like_expected(case, run_as_backend(bundle, case, inputs))


def reduce_max(path):
    return save(path, [helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)],
                [helper.make_tensor_value_info("x", T.FLOAT, [3, 4]),
                 helper.make_tensor_value_info("axes", T.INT64, [1])],
                [helper.make_tensor_value_info("y", T.FLOAT, [3, 1])], opset=18)


def test_an_axes_input_asks_for_samples_and_is_built_in_from_them(write_recipe, tmp_path):
    reduce_max(tmp_path / "rmax.onnx")
    proc = edgekit("build", "--recipe", str(write_recipe("model: {onnx: rmax.onnx}\n")),
                   "--target", "host", cwd=tmp_path)
    assert proc.returncode == 3
    assert "input 'axes' sets the axes of ReduceMax" in one_error(proc)
    np.savez(tmp_path / "s.npz", x=np.random.default_rng(0).random((3, 4), np.float32),
             axes=np.array([1], np.int64))
    recipe = write_recipe("name: rmax\nmodel: {onnx: rmax.onnx}\nsamples: s.npz\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    notes = bundle.manifest.model_notes
    assert any("inputs built into the module as constants" in n and "'axes' = [1]" in n
               for n in notes), notes
    assert any("2 more drawn like it" in n for n in notes), notes
    drawn = [np.load(bundle.file(s.inputs[1])) for s in bundle.manifest.more_golden]
    assert all(np.array_equal(a, [1]) for a in drawn)    # the axes stay what the module is
    assert validate_local(bundle.path).ok


def test_static_true_without_samples_is_one_line(write_recipe, tmp_path):
    reduce_max(tmp_path / "rmax.onnx")
    recipe = write_recipe("model: {onnx: rmax.onnx}\ninputs:\n"
                          "  - {name: x, shape: [3, 4], static: true}\n"
                          "  - {name: axes, shape: [1], dtype: int64}\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "input 'x' is marked `static: true` but the recipe gives no `samples:`" in \
        one_error(proc)


def test_the_onnx_model_is_unchanged_on_disk_and_goldens_come_from_it(tmp_path):
    (case,) = cases("^test_rms_normalization_2d_axis0$")
    before = case.model.SerializeToString()
    bundle = build_model(case.model, "host", tmp_path, list(case.data_sets[0][0]))
    assert onnx.load(str(tmp_path / "model.onnx")).SerializeToString() == before
    assert bundle.manifest.golden_reference.startswith(("onnxruntime", "onnx.reference"))
    assert validate_local(bundle.path).ok


def test_check_takes_the_graph_as_the_build_does_and_calls_attention_buildable(tmp_path):
    import json
    (case,) = cases("^test_attention_3d$")
    onnx.save(case.model, str(tmp_path / "attention.onnx"))
    proc = edgekit("check", str(tmp_path / "attention.onnx"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["buildable"] and report["chosen"] == "torch", report
    assert "Attention" not in {o["op"] for o in report["ops"]}   # its body's ops instead


@pytest.mark.parametrize("name, op", [("test_affine_grid_2d", "AffineGrid"),
                                      ("test_rms_normalization_3d_axis1_epsilon",
                                       "RMSNormalization"),
                                      ("test_rotary_embedding_interleaved", "RotaryEmbedding"),
                                      ("test_flexattention_gqa", "FlexAttention"),
                                      ("test_causal_conv_with_state_silu", "CausalConvWithState"),
                                      # expanded in CRD mode only (the importer ignores it)
                                      ("test_spacetodepth_crd_mode_example", "SpaceToDepth"),
                                      ("test_sce_mean_3d", "SoftmaxCrossEntropyLoss"),
                                      ("test_nllloss_NCd1_mean_weight_negative_ii",
                                       "NegativeLogLikelihoodLoss")])
def test_other_function_ops_build_and_give_the_cases_outputs(name, op, tmp_path):
    (case,) = cases(f"^{name}$")
    inputs = list(case.data_sets[0][0])
    bundle = build_model(case.model, "host", tmp_path, inputs)
    assert any(f"{op} ×1" in n for n in bundle.manifest.model_notes), bundle.manifest.model_notes
    assert validate_local(bundle.path).ok
    assert_like_expected(case, run_as_backend(bundle, case, inputs))


def test_masked_attention_scores_are_judged_by_the_spec_not_onnxruntimes_lowest(tmp_path):
    # the case's 4th output is the masked QK product: -inf in the spec, the float's lowest value
    # in onnxruntime; the module (the spec's body) writes -inf and validates against the spec
    name = "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal"
    (case,) = cases(f"^{name}$")
    inputs = list(case.data_sets[0][0])
    bundle = build_model(case.model, "host", tmp_path, inputs)
    assert "answered unlike the spec" in bundle.manifest.golden_reference
    assert validate_local(bundle.path).ok
    outputs = run_as_backend(bundle, case, inputs)
    assert np.isneginf(outputs[3]).any()
    assert_like_expected(case, outputs)


@pytest.mark.parametrize("name", ("test_rms_normalization_3d_axis_negative_2_epsilon_expanded",
                                  "test_rotary_embedding_no_position_ids_rotary_dim_expanded"))
def test_a_spec_body_written_out_has_its_run_time_axes_folded(name, tmp_path):
    # no op to expand: the graph computes ReduceMean's axes (Shape → Size → Range) itself
    from edgekit.pipeline.frontends.onnx_expand import needs_folding
    (case,) = [c for c in cases_expanded(name)]
    assert needs_folding(case.model)
    inputs = list(case.data_sets[0][0])
    bundle = build_model(case.model, "host", tmp_path, inputs)
    assert validate_local(bundle.path).ok
    assert_like_expected(case, run_as_backend(bundle, case, inputs))


def cases_expanded(name):
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.name == name]


def test_a_graph_with_constant_axes_needs_no_folding():
    from edgekit.pipeline.frontends.onnx_expand import needs_folding
    model = scan_model()
    assert not needs_folding(model)
    (case,) = cases("^test_reduce_mean_default_axes_keepdims_example$")
    assert not needs_folding(case.model)
