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
