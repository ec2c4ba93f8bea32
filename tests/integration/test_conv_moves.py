"""Graph moves for CNNs with the real torch-mlir and IREE on a three-convolution model: the
per-convolution choice places every convolution in both builds' HAL profiles, and the mix it
builds (with BatchNorm folded) validates against the model as written."""

from edgekit import BuildOptions, build, validate_local
from edgekit.pipeline.build import Variant
from edgekit.tune.conv_choice import model_convs, pick, selection_for, shape_of
from edgekit.tune.dispatch_search import profile_ms


def test_the_per_convolution_choice_places_each_convolution_and_builds(write_recipe, tmp_path):
    recipe = write_recipe('name: convbn\nmodel:\n  python: "@TINY@:conv_bn_net"\n')
    convs = model_convs(recipe)
    assert len(convs) == 3

    def built(flags, name):
        return build(BuildOptions(recipe=recipe, target="host", out=tmp_path / name,
                                  variant=Variant("tosa", name, flags), use_tuned=False)).bundle
    direct = built(("--iree-opt-data-tiling",), "direct")
    im2col = built(("--iree-opt-data-tiling", "--edgekit-im2col-convs=all"), "im2col")
    choices = pick(profile_ms(direct, tmp_path), profile_ms(im2col, tmp_path),
                   {shape_of(c) for c in convs})
    # IREE's dispatch names carry every shape, in both builds
    assert all(c.direct_ms is not None and c.im2col_ms is not None for c in choices), \
        [c.note() for c in choices]
    # the mix (here with BatchNorm folded too; a choice of none: two convolutions, to see it)
    selection = selection_for(convs, choices) or "1-2"
    mix = built(("--iree-opt-data-tiling", "--edgekit-fold-batchnorm=on",
                 f"--edgekit-im2col-convs={selection}"), "mix")
    note = mix.manifest.lowering.note
    assert "3 of 3 BatchNorms folded into their convolutions" in note
    assert f"convolutions as im2col + matmul (--edgekit-im2col-convs={selection})" in note
    assert validate_local(mix.path).ok    # against the model as written
