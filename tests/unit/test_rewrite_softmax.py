"""`--edgekit-softmax-by-columns`: which softmax it rewrites, and that the rewritten program
computes the same (real exported programs, no compiler involved)."""

import numpy as np
import pytest
import torch

from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import TorchFrontend
from edgekit.pipeline.rewrite import rewrite_graph
from edgekit.pipeline.rewrite_softmax import by_columns
from tests.fixtures.tiny_attention import tiny_attention


@pytest.mark.parametrize("shape, dim, min_rows, expected", [
    ((1, 2, 32, 32), -1, 16, True),
    ((1, 2, 32, 32), 3, 32, True),
    ((1, 2, 32, 32), 3, 33, False),     # too few rows to fill the vectors
    ((1, 2, 32, 32), -2, 16, False),    # already over the rows
    ((1, 4), -1, 1, True),
    ((8,), -1, 1, False),               # a vector has no rows to vectorize across
])
def test_a_softmax_goes_by_columns_only_over_the_last_dim_with_enough_rows(
        shape, dim, min_rows, expected):
    assert by_columns(shape, dim, min_rows) is expected


def test_attention_scores_come_transposed_from_their_matmul_with_the_same_outputs():
    model, (x,) = tiny_attention()
    program = torch.export.export(model, (x,))
    before = program.graph_module.code
    exported = ExportedModel(frontend=TorchFrontend(), program=program, digest="d",
                             samples=(x.numpy(),), golden=(), inputs=(), outputs=())
    rewritten = rewrite_graph(exported, ("--edgekit-softmax-by-columns=16",
                                         "--iree-opt-data-tiling"))
    # the attention and gate softmax (32 rows) qualify; the 1-row logits do not
    assert rewritten.rewrites == ("2 of 3 softmax by columns (--edgekit-softmax-by-columns=16)",)
    assert program.graph_module.code == before     # the caller's program is left as it was
    softmax = [n for n in rewritten.program.graph.nodes
               if n.target is torch.ops.aten._softmax.default]
    ranks = [len(n.args[0].meta["val"].shape) for n in softmax]
    assert sorted(n.args[1] % r for n, r in zip(softmax, ranks)) == [1, 1, 2]
    # the attention scores come from k·qᵀ (kᵀ transposed back), scaled, straight into the
    # softmax: no transpose of the product between them
    scaled = softmax[0].args[0]
    assert scaled.target is torch.ops.aten.div.Tensor
    product = scaled.args[0]
    assert product.target is torch.ops.aten.matmul.default
    assert [a.target for a in product.args] == [torch.ops.aten.transpose.int] * 2
    with torch.no_grad():
        np.testing.assert_allclose(rewritten.program.module()(x).numpy(), model(x).numpy(),
                                   atol=1e-6)


@pytest.mark.parametrize("flag", ["--edgekit-softmax-by-columns=0",
                                  "--edgekit-softmax-by-columns=x",
                                  "--edgekit-softmax-by-columns"])
def test_a_bad_softmax_option_is_refused(flag):
    with pytest.raises(ValueError, match="softmax-by-columns=… \\(min rows"):
        parse_edgekit_flags((flag,))
