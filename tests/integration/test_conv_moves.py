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


def test_pointwise_convolutions_as_matmuls_compile_into_contractions_and_validate(
        write_recipe, tmp_path):
    recipe = write_recipe('name: pointwise\nmodel:\n  python: "@TINY@:inverted_residual"\n')
    flags = ("--edgekit-pointwise-as-matmul=on", "--iree-llvmcpu-number-of-threads=2")
    bundle = build(BuildOptions(recipe=recipe, target="host", out=tmp_path / "b",
                                variant=Variant("tosa", "pointwise", flags),
                                use_tuned=False)).bundle
    assert "2 of 3 convolutions as im2col + matmul (--edgekit-pointwise-as-matmul=on)" in \
        bundle.manifest.lowering.note
    kinds = profile_ms(bundle, tmp_path)
    # the expand convolution: one 4-D contraction (14x14 pixels, 64 <- 16 channels) that
    # writes into the depthwise convolution's padded input, no copy dispatch between them
    assert any("matmul_like_14x14x64x16" in k for k in kinds), sorted(kinds)
    assert not any("memcpy" in k for k in kinds), sorted(kinds)
    assert validate_local(bundle.path).ok    # against the model as written


def test_the_per_convolution_step_gives_a_near_miss_its_second_look_on_its_builds(
        write_recipe, monkeypatch):
    """`--conv-choice` measured whole: every shape forced to im2col (so the mix is built and
    measured against the chosen variant), every result a near miss, none clearly faster."""
    import dataclasses
    from edgekit.config.profiles import load_target
    from edgekit.tune import conv_choice, tuner
    recipe = write_recipe('name: pyramid-second-look\nmodel:\n  python: "@TINY@:conv_pyramid"\n')
    real_pick = conv_choice.pick
    monkeypatch.setattr(conv_choice, "pick", lambda *a: [
        dataclasses.replace(c, im2col=True) for c in real_pick(*a)])
    monkeypatch.setattr(tuner, "near_miss", lambda a, b: True)
    monkeypatch.setattr(tuner, "clearly_faster", lambda a, b, min_gain=0.03: False)
    chosen = tuner.CandidateResult(lowering="tosa", flag_set="default", flags=(), threads=1,
                                   status="ok", p50_ms=1.0, round_p50_ms=(1.0, 1.0, 1.0))
    options = tuner.TuneOptions(recipe=recipe, target="host", rounds=3, repetitions=9,
                                conv_choice=True)
    said = []
    kept, tried = conv_choice.choose_convs(options, load_target("host"), chosen, said.append)
    assert [r.flag_set for r in tried] == ["default+im2col-convs=all"], tried
    verdicts = [s for s in said if s.startswith(("a second look", "kept", "not kept"))]
    assert verdicts[0].startswith("a second look for"), said
    assert verdicts[-1].startswith("not kept") and "in the same 6 rounds" in verdicts[-1], said
    assert kept is chosen
