"""Graph rewrites before lowering, on a real exported program (no compiler involved)."""

import numpy as np
import pytest
import torch

from edgekit.config.edgekit_flags import parse_edgekit_flags, without_edgekit_flags
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import TorchFrontend
from edgekit.pipeline.rewrite import rewrite_graph
from tests.fixtures.tiny_models import conv_pyramid


def exported_pyramid() -> tuple[ExportedModel, torch.nn.Module, torch.Tensor]:
    model, (x,) = conv_pyramid()
    program = torch.export.export(model, (x,))
    return ExportedModel(frontend=TorchFrontend(), program=program, digest="d",
                         samples=(x.numpy(),), golden=(), inputs=(), outputs=()), model, x


def test_small_convolutions_become_matmuls_with_the_same_outputs():
    exported, model, x = exported_pyramid()
    rewritten = rewrite_graph(exported, ("--edgekit-convs-as-matmul=64", "--iree-opt-data-tiling"))
    # the 8x8 outputs (strided, dilated) qualify; the 16x16 one and the 1x1 do not
    assert rewritten.rewrites == ("2 of 4 convolutions as im2col + matmul "
                                  "(--edgekit-convs-as-matmul=64)",)
    targets = [n.target for n in rewritten.program.graph.nodes]
    assert targets.count(torch.ops.aten.convolution.default) == 2
    assert torch.ops.aten.matmul.default in targets
    assert rewritten.digest == exported.digest  # still the same model
    with torch.no_grad():
        np.testing.assert_allclose(rewritten.program.module()(x).numpy(), model(x).numpy(),
                                   atol=1e-5)


def test_without_the_option_nothing_changes():
    exported, _, _ = exported_pyramid()
    assert rewrite_graph(exported, ("--iree-opt-data-tiling",)) is exported


@pytest.mark.parametrize("flag", ["--edgekit-convs-as-matmul=0", "--edgekit-convs-as-matmul",
                                  "--edgekit-no-such-option=3"])
def test_a_bad_edgekit_option_is_refused_in_the_recipe(flag, write_recipe):
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    with pytest.raises(ValueError, match="edgekit option"):
        parse_edgekit_flags((flag,))
    recipe = write_recipe(f'name: x\nmodel: {{python: "m:f"}}\ncompile:\n  flags: [{flag}]\n')
    with pytest.raises(ConfigError, match="edgekit option") as err:
        load_recipe(recipe)
    assert "recipe.yaml:4" in str(err.value) or "recipe.yaml:3" in str(err.value)


def test_edgekit_options_never_reach_iree_compile():
    assert without_edgekit_flags(("--edgekit-convs-as-matmul=196", "--iree-opt-data-tiling")) == (
        "--iree-opt-data-tiling",)
