"""The u8 form's integer bookkeeping (pipeline/rewrite_int8.py): pure logic on small tensors."""

import torch

from edgekit.pipeline.rewrite_int8 import _correction_taps, _pieces


def test_correction_pieces_are_int8_and_sum_to_each_channels_total():
    total = torch.tensor([0, 1, -1, 127, -128, 3429, -3429, 5000])
    k = 40
    pieces = _pieces(total, k)
    assert pieces.shape == (8, k)
    assert int(pieces.abs().max()) <= 127
    assert torch.equal(pieces.sum(1), total)


def test_enough_taps_hold_the_largest_weight_sum():
    g = torch.Generator().manual_seed(0)
    weight = torch.randint(-127, 128, (16, 3, 3, 4), dtype=torch.int8, generator=g)
    taps = _correction_taps(weight, 134, 4)
    sums = weight.to(torch.int64).flatten(1).sum(1)
    assert taps * 4 * 127 >= int(sums.abs().max()) > (taps - 1) * 4 * 127
    # the patch side: zp × every piece cancels zp × the weights' sum, exactly
    pieces = _pieces(-sums, taps * 4)
    assert torch.equal(134 * weight.to(torch.int64).flatten(1).sum(1) + 134 * pieces.sum(1),
                       torch.zeros(16, dtype=torch.int64))


def test_a_zero_weight_sum_needs_no_taps():
    assert _correction_taps(torch.zeros(4, 3, 3, 4, dtype=torch.int8), 134, 4) == 0


def test_the_option_takes_on_and_u8_only():
    import pytest

    from edgekit.config.edgekit_flags import parse_edgekit_flags
    for value in ("on", "u8"):
        assert parse_edgekit_flags((f"--edgekit-int8-convs-as-matmul={value}",)) == \
            {"int8-convs-as-matmul": value}
    with pytest.raises(ValueError, match="int8-convs-as-matmul"):
        parse_edgekit_flags(("--edgekit-int8-convs-as-matmul=s8",))


def test_the_fast_quantize_is_pytorchs_quantize_bit_for_bit():
    # ties (k + 0.5 after the scale), values past either end, zero points inside and at the
    # range's end: round half to even by + 1.5·2²³ − 1.5·2²³ after the clamp
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the ops)

    from edgekit.pipeline.rewrite_int8 import _fast_quantize
    q = torch.ops.quantized_decomposed
    g = torch.Generator().manual_seed(3)
    scale = 0.0151183633
    ties = (torch.arange(-300, 300, dtype=torch.float32) + 0.5) * scale
    x = torch.cat([ties, torch.randn(20000, generator=g) * 3, torch.tensor([0.0, -0.0, 1e30,
                                                                          -1e30, 4e6])])
    for zp, qmin, qmax, dtype in ((6, -128, 127, torch.int8), (-128, -128, 127, torch.int8),
                                  (0, 0, 255, torch.uint8), (134, 0, 255, torch.uint8)):
        graph = torch.fx.Graph()
        arg = graph.placeholder("x")
        graph.output(graph.call_function(q.quantize_per_tensor.default,
                                         (arg, scale, zp, qmin, qmax, dtype)))
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        expected = gm(x)
        assert _fast_quantize(gm) == 1
        gm.recompile()
        assert "quantize_per_tensor" not in gm.code
        got = gm(x)
        assert got.dtype == dtype and torch.equal(got, expected), (zp, (got != expected).sum())
    # int32: past 2²² the trick would not round, so the op stays
    graph = torch.fx.Graph()
    graph.output(graph.call_function(q.quantize_per_tensor.default, (
        graph.placeholder("x"), scale, 0, -2 ** 31, 2 ** 31 - 1, torch.int32)))
    assert _fast_quantize(torch.fx.GraphModule(torch.nn.Module(), graph)) == 0
