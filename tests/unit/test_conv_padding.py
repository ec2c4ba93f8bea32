"""String-padded convolutions (`padding="same"`/"valid") become explicit ones the int8 quantizer
annotates (pipeline/quantize/conv_padding.py): same outputs, no `.padding` overload left."""

import warnings

import pytest
import torch
from torch import nn

from edgekit.pipeline.quantize.conv_padding import explicit_conv_padding
from edgekit.pipeline.quantize.int8 import (contraction_layers, quantize_graph,
                                            quantized_contractions)

aten = torch.ops.aten


class StringPadded(nn.Module):
    def __init__(self):
        super().__init__()
        self.same = nn.Conv2d(3, 8, 3, padding="same")
        # even kernel, dilation 2 on one axis: an odd total pads one more after (rows)
        self.uneven = nn.Conv2d(8, 8, (2, 4), padding="same", dilation=(1, 2), groups=8)
        self.valid = nn.Conv2d(8, 8, 1, padding="valid")
        self.line = nn.Conv1d(8, 4, 4, padding="same")
        self.cube = nn.Conv3d(1, 2, 3, padding="same")

    def forward(self, x):
        y = self.valid(torch.relu(self.uneven(torch.relu(self.same(x)))))
        return self.line(y.flatten(2)), self.cube(x[:, :1].unsqueeze(1))


def exported():
    torch.manual_seed(0)
    model, x = StringPadded().eval(), torch.randn(1, 3, 8, 8)
    with warnings.catch_warnings():  # torch's note that an even "same" kernel copies the input
        warnings.simplefilter("ignore", UserWarning)
        return model, x, torch.export.export(model, (x,)).module()


def targets(graph):
    return [n.target for n in graph.graph.nodes if n.op == "call_function"]


def test_every_string_padded_convolution_becomes_an_explicit_one_with_the_same_outputs():
    model, x, graph = exported()
    assert targets(graph).count(aten.conv2d.padding) == 3
    assert explicit_conv_padding(graph) == 5
    found = targets(graph)
    assert not {aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding} & set(found)
    assert found.count(aten.conv2d.default) == 3 and aten.conv1d.default in found
    # the even kernels' one extra row/tap after: an explicit zero pad before the convolution
    assert found.count(aten.constant_pad_nd.default) == 2
    uneven = [n for n in graph.graph.nodes if n.target == aten.conv2d.default][1]
    assert uneven.args[4] == [0, 3] and uneven.args[5] == [1, 2] and uneven.args[6] == 8
    for got, want in zip(graph(x), model(x)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert explicit_conv_padding(graph) == 0  # nothing left to do


@pytest.mark.parametrize("keep", [frozenset(), frozenset({"same"})])
def test_the_quantizer_annotates_string_padded_convolutions(keep):
    model, x, graph = exported()
    assert contraction_layers(graph) == ["same", "uneven", "valid", "line", "cube"]
    quantized = quantize_graph(graph, [(x,)], per_channel=True, weights_only=False,
                               keep_float=keep)
    assert quantized_contractions(quantized) == 5 - len(keep)
    for got, want in zip(quantized(x), model(x)):
        assert (got - want).abs().max() < 0.05 * want.abs().max()
