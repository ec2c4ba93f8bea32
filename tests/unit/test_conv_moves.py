"""Graph moves for CNNs: which convolutions become im2col + matmul (by index), BatchNorm folded
into its convolution (a real exported program, no compiler), and the per-convolution choice
from two builds' per-dispatch costs (pure)."""

import numpy as np
import pytest
import torch

from edgekit.config.edgekit_flags import conv_selection, format_selection, parse_edgekit_flags
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import TorchFrontend
from edgekit.pipeline.rewrite import ConvShape, conv_shapes, rewrite_graph
from edgekit.tune.conv_choice import pick, selection_for, shape_of, without_conv_options
from tests.fixtures.tiny_models import conv_bn_net


def exported_conv_bn():
    model, (x,) = conv_bn_net()
    program = torch.export.export(model, (x,))
    return ExportedModel(frontend=TorchFrontend(), program=program, digest="d",
                         samples=(x.numpy(),), golden=(), inputs=(), outputs=()), model, x


def run(program, x):
    with torch.no_grad():
        return program.module()(x).numpy()


@pytest.mark.parametrize("value, indices", [("all", None), ("0", {0}), ("0,3,5-7", {0, 3, 5, 6, 7}),
                                            ("2-2", {2})])
def test_an_im2col_selection_names_convolutions_by_index(value, indices):
    assert parse_edgekit_flags((f"--edgekit-im2col-convs={value}",)) == {"im2col-convs": value}
    assert conv_selection(value) == (None if indices is None else frozenset(indices))


@pytest.mark.parametrize("flag", ["--edgekit-im2col-convs=", "--edgekit-im2col-convs=1,",
                                  "--edgekit-im2col-convs=a-b", "--edgekit-fold-batchnorm=yes",
                                  "--edgekit-fold-batchnorm"])
def test_a_malformed_conv_option_is_refused(flag):
    with pytest.raises(ValueError, match="edgekit option"):
        parse_edgekit_flags((flag,))


def test_a_selection_is_written_compactly_and_reads_back():
    assert format_selection([9, 0, 3, 5, 6, 7, 8]) == "0,3,5-9"
    assert format_selection([]) == ""
    assert conv_selection(format_selection([1, 2, 4])) == {1, 2, 4}


def test_conv_shapes_lists_the_graph_convolutions_in_order():
    exported, _, _ = exported_conv_bn()
    assert conv_shapes(exported.program) == [ConvShape(0, 16, 32, 32, 3, 3, 3, 1),
                                             ConvShape(1, 32, 16, 16, 16, 3, 3, 1),
                                             ConvShape(2, 64, 8, 8, 32, 1, 1, 1)]


def test_batchnorm_folds_into_its_convolution_with_the_same_outputs():
    exported, model, x = exported_conv_bn()
    before = run(exported.program, x)
    rewritten = rewrite_graph(exported, ("--edgekit-fold-batchnorm=on",))
    assert rewritten.rewrites == ("3 of 3 BatchNorms folded into their convolutions "
                                  "(--edgekit-fold-batchnorm=on)",)
    targets = [n.target for n in rewritten.program.graph.nodes]
    assert torch.ops.aten.batch_norm.default not in targets
    np.testing.assert_allclose(run(rewritten.program, x), model(x).detach().numpy(),
                               atol=1e-5)
    np.testing.assert_array_equal(run(exported.program, x), before)   # the original is intact


def test_only_the_selected_convolutions_become_matmuls():
    exported, model, x = exported_conv_bn()
    rewritten = rewrite_graph(exported, ("--edgekit-im2col-convs=0,2",))
    assert rewritten.rewrites == ("2 of 3 convolutions as im2col + matmul "
                                  "(--edgekit-im2col-convs=0,2)",)
    left = [n for n in rewritten.program.graph.nodes
            if n.target is torch.ops.aten.convolution.default]
    assert [tuple(n.args[1].meta["val"].shape) for n in left] == [(32, 16, 3, 3)]  # conv 1
    np.testing.assert_allclose(run(rewritten.program, x), model(x).detach().numpy(),
                               atol=1e-4)


def test_pointwise_as_matmul_rewrites_the_1x1_convolutions_only_with_a_cin_by_cout_weight():
    exported, model, x = exported_conv_bn()
    rewritten = rewrite_graph(exported, ("--edgekit-pointwise-as-matmul=on",))
    assert rewritten.rewrites == ("1 of 3 convolutions as im2col + matmul "
                                  "(--edgekit-pointwise-as-matmul=on)",)
    nodes = rewritten.program.graph.nodes
    left = [tuple(n.args[1].meta["val"].shape) for n in nodes
            if n.target is torch.ops.aten.convolution.default]
    assert left == [(16, 3, 3, 3), (32, 16, 3, 3)]          # the 3x3 ones stay convolutions
    # conv 2 (32 -> 64 channels, 1x1): a matmul whose weight operand is (cin, cout)
    weights = [tuple(n.args[1].meta["val"].shape) for n in nodes
               if n.target is torch.ops.aten.matmul.default]
    assert weights == [(32, 64)]
    np.testing.assert_allclose(run(rewritten.program, x), model(x).detach().numpy(),
                               atol=1e-4)
    with pytest.raises(ValueError, match="edgekit option"):
        parse_edgekit_flags(("--edgekit-pointwise-as-matmul=yes",))


def test_a_pointwise_convolution_feeding_a_padded_one_becomes_a_multiply_and_sum():
    # MobileNetV2's block: expand 1x1 -> ReLU6 -> depthwise 3x3 (pads its input) -> project
    # 1x1; only the expand convolution's result is padded next
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 1), torch.nn.ReLU6(),
                                torch.nn.Conv2d(16, 16, 3, padding=1, groups=16),
                                torch.nn.Conv2d(16, 8, 1)).eval()
    x = torch.randn(1, 8, 6, 6)
    exported = ExportedModel(frontend=TorchFrontend(), program=torch.export.export(model, (x,)),
                             digest="d", samples=(x.numpy(),), golden=(), inputs=(), outputs=())
    rewritten = rewrite_graph(exported, ("--edgekit-pointwise-as-matmul=on",))
    targets = [n.target for n in rewritten.program.graph.nodes]
    assert targets.count(torch.ops.aten.sum.dim_IntList) == 1       # the expand convolution
    assert targets.count(torch.ops.aten.matmul.default) == 1        # the project convolution
    assert targets.count(torch.ops.aten.convolution.default) == 1   # the depthwise one stays
    np.testing.assert_allclose(run(rewritten.program, x), model(x).detach().numpy(), atol=1e-5)


# --- the per-convolution choice (pure) --------------------------------------------------------

A = (64, 56, 56, 64, 3, 3)       # cout, oh, ow, cin, kh, kw
B = (128, 28, 28, 64, 1, 1)
C = (512, 7, 7, 512, 3, 3)


def test_each_shape_takes_the_cheaper_of_direct_and_im2col():
    direct = {"main_dispatch_4_conv_64x56x56x64x3x3_f32": 2.5,           # NCHW names
              "main_dispatch_11_matmul_like_128x28x28x64_f32": 80.0,
              "main_dispatch_26_conv_512x7x7x512x3x3_f32": 3.7,
              "main_dispatch_3_slow_memcpy": 0.1}
    im2col = {"main_dispatch_9_matmul_3136x64x576_f32": 4.0,
              "main_dispatch_12_matmul_784x128x64_f32": 0.5,
              "main_dispatch_40_matmul_49x512x4608_f32": 2.0,
              "main_dispatch_3_slow_memcpy": 0.1, "main_dispatch_8_slow_memcpy": 0.3}
    choices = {c.shape: c for c in pick(direct, im2col, {A, B, C})}
    assert [choices[s].im2col for s in (A, B, C)] == [False, True, True]
    # the im2col build's extra copies (0.3 ms) are shared by patch size: A gets most of it
    assert choices[A].im2col_ms == pytest.approx(4.0 + 0.3 * 3136 * 576 /
                                                 (3136 * 576 + 784 * 64 + 49 * 4608))
    assert "128x28x28x64x1x1: direct 80.000 / im2col" in choices[B].note()


def test_nhwc_dispatch_names_map_too_and_an_unplaced_shape_stays_direct():
    direct = {"main_dispatch_28_conv_7x7x512x3x3x512_f32": 20.0,          # TOSA: NHWC
              "main_dispatch_11_matmul_like_784x128x64_f32": 0.15}       # pixels collapsed
    im2col = {"main_dispatch_40_batch_matmul_1x49x512x4608_f32": 5.0,
              "main_dispatch_12_matmul_784x128x64_f32": 0.5}
    choices = {c.shape: c for c in pick(direct, im2col, {A, B, C})}
    assert choices[C].im2col and not choices[B].im2col
    assert choices[A].direct_ms is None and not choices[A].im2col


def test_a_name_two_shapes_share_belongs_to_neither():
    nchw = (16, 8, 8, 4, 1, 1)          # matmul_like_16x8x8x4 in NCHW order
    nhwc = (8, 16, 8, 4, 1, 1)          # … and in NHWC order
    other = (32, 4, 4, 4, 1, 1)
    direct = {"d_matmul_like_16x8x8x4_f32": 1.0, "d_matmul_like_4x4x32x4_f32": 2.0}
    on = {c.shape: c.direct_ms for c in pick(direct, {}, {nchw, nhwc, other})}
    assert on == {nchw: None, nhwc: None, other: 2.0}


def test_the_selection_lists_the_indices_of_the_chosen_shapes():
    convs = [ConvShape(0, *A[:4], 3, 3, 1), ConvShape(1, *B[:4], 1, 1, 1),
             ConvShape(2, 64, 56, 56, 1, 3, 3, 64), ConvShape(3, *C[:4], 3, 3, 1),
             ConvShape(4, *C[:4], 3, 3, 1)]
    assert [shape_of(c) for c in convs][3] == C
    choices = pick({}, {}, {A, B, C})
    assert selection_for(convs, choices) == ""
    some = [c if c.shape != C else type(c)(C, 1.0, 0.5, True) for c in choices]
    assert selection_for(convs, some) == "3-4"
    every = [type(c)(c.shape, 1.0, 0.5, True) for c in choices]
    assert selection_for(convs, every) == "all"     # the depthwise one never counts


def test_the_variants_own_conv_options_are_dropped_for_the_two_builds():
    assert without_conv_options(("--edgekit-convs-as-matmul=196", "--iree-opt-data-tiling",
                                 "--edgekit-im2col-convs=1-3", "--edgekit-fold-batchnorm=on",
                                 "--edgekit-pointwise-as-matmul=on")
                                ) == ("--iree-opt-data-tiling", "--edgekit-fold-batchnorm=on")


def test_same_padding_convolutions_are_numbered_and_rewritten_too():
    # MobileNetV2-like's stride-1 convolutions are conv2d's "same" overload; an even kernel
    # pads one pixel more at the end
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding="same"),
                                torch.nn.Conv2d(8, 8, 2, padding="same"),
                                torch.nn.Conv2d(8, 4, 1, padding="valid")).eval()
    x = torch.randn(1, 3, 9, 9)
    exported = ExportedModel(frontend=TorchFrontend(), program=torch.export.export(model, (x,)),
                             digest="d", samples=(x.numpy(),), golden=(), inputs=(), outputs=())
    assert [c.index for c in conv_shapes(exported.program)] == [0, 1, 2]
    rewritten = rewrite_graph(exported, ("--edgekit-im2col-convs=all",))
    assert rewritten.rewrites == ("3 of 3 convolutions as im2col + matmul "
                                  "(--edgekit-im2col-convs=all)",)
    np.testing.assert_allclose(run(rewritten.program, x), model(x).detach().numpy(), atol=1e-5)
    kept = rewrite_graph(exported, ("--edgekit-im2col-convs=1",))
    np.testing.assert_allclose(run(kept.program, x), model(x).detach().numpy(), atol=1e-5)
