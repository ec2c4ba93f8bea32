"""Per-dispatch tile sizes (tune/dispatch_configs.py): candidates around the compiler's choice,
the edit of a configured executable, the digest that names a configuration set."""

import pytest

from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.toolchain.iree_configs import ConfiguredDispatch
from edgekit.tune.dispatch_configs import (candidate_levels, hot_dispatches, lowering_config,
                                           set_digest, two_vector_tiles, weights_once,
                                           wide_accumulators, with_levels)

MATMUL = (("distribution", (64, 64, 0)), ("vector_common_parallel", (8, 16, 0)),
          ("vector_reduction", (0, 0, 16)))
CONV = (("distribution", (0, 16, 14, 28, 0, 0, 0)),
        ("vector_common_parallel", (1, 16, 1, 7, 0, 0, 0)),
        ("vector_reduction", (0, 0, 0, 0, 8, 1, 1)))


def test_candidates_start_next_to_the_compilers_choice_and_never_repeat_it():
    found = candidate_levels(MATMUL, limit=20)
    assert MATMUL not in found and len(found) == len(set(found))
    tables = [dict(c) for c in found]
    assert tables[0]["distribution"] == (32, 32, 0)
    assert {t["distribution"] for t in tables} >= {(32, 32, 0), (128, 128, 0)}
    assert {t["vector_reduction"] for t in tables} >= {(0, 0, 8), (0, 0, 32)}


def test_without_vector_moves_the_register_tile_is_the_compilers():
    # mmt4d: the register tile is the data-tiling layout's inner tile
    mmt4d = (("distribution", (1, 2, 0, 0, 0, 0)),
             ("vector_common_parallel", (1, 1, 0, 16, 16, 0)),
             ("vector_reduction", (0, 0, 1, 0, 0, 1)))
    found = candidate_levels(mmt4d, limit=20, vector_moves=False)
    assert found and all(dict(c)["vector_common_parallel"] == (1, 1, 0, 16, 16, 0)
                         for c in found)


def test_a_register_tile_twice_as_wide_is_among_the_first_tries_where_it_fits():
    # ResNet18-like's 3x3 convolutions: IREE takes 16 output channels by 8 (56x56) or 7
    # (28x28) columns; 32 channels ran 1.08 -> 0.94 and 1.15 -> 0.94 ms
    for vec, dist in (((1, 1, 8, 16, 0, 0, 0), (0, 4, 56, 64, 0, 0, 0)),
                      ((1, 1, 7, 16, 0, 0, 0), (0, 4, 28, 64, 0, 0, 0))):
        conv = (("distribution", dist), ("vector_common_parallel", vec),
                ("vector_reduction", (0, 0, 0, 0, 1, 1, 8)))
        first = [dict(c)["vector_common_parallel"] for c in candidate_levels(conv, limit=3)]
        assert vec[:3] + (32, 0, 0, 0) in first
        # where the register tile is IREE's data-tiling layout, it stays
        assert all(dict(c)["vector_common_parallel"] == vec
                   for c in candidate_levels(conv, limit=30, vector_moves=False))
    # a workgroup of 16 channels cannot hold 32: no such candidate
    depthwise = (("distribution", (0, 8, 56, 16, 0, 0)),
                 ("vector_common_parallel", (1, 1, 4, 16, 0, 0)),
                 ("vector_reduction", (0, 0, 0, 0, 1, 3)))
    assert (1, 1, 4, 32, 0, 0) not in [dict(c)["vector_common_parallel"]
                                       for c in candidate_levels(depthwise, limit=30)]


def test_a_deeper_register_tile_divides_its_distribution_tile():
    # ResNet18-like's 56x56 3x3 convolution: 8 output columns by 16 channels, 56 columns per
    # workgroup; 16 columns would not divide 56, 14 do
    conv = (("distribution", (0, 4, 56, 64, 0, 0, 0)),
            ("vector_common_parallel", (1, 1, 8, 16, 0, 0, 0)),
            ("vector_reduction", (0, 0, 0, 0, 1, 1, 8)))
    first = [dict(c)["vector_common_parallel"] for c in candidate_levels(conv, limit=3)]
    assert (1, 1, 14, 16, 0, 0, 0) in first
    # where double divides it, double (MobileNetV2-like's depthwise: 4 -> 8 columns)
    depthwise = (("distribution", (0, 8, 56, 16, 0, 0)),
                 ("vector_common_parallel", (1, 1, 4, 16, 0, 0)),
                 ("vector_reduction", (0, 0, 0, 0, 1, 3)))
    assert (1, 1, 8, 16, 0, 0) in [dict(c)["vector_common_parallel"]
                                   for c in candidate_levels(depthwise, limit=3)]


def test_a_register_tile_on_a_strided_loop_is_moved_or_spread_among_the_first_tries():
    # ResNet18-like's strided 1x1 convolution (matmul_like_128x28x28x64): IREE vectorizes the
    # 28 output columns, which read their input with stride 2; 8x4 lanes took 0.43 ms, not 143
    strided = (("distribution", (16, 14, 28, 0)), ("vector_common_parallel", (1, 1, 28, 0)),
               ("vector_reduction", (0, 0, 0, 16)))
    first = [dict(c)["vector_common_parallel"] for c in candidate_levels(strided, limit=4)]
    assert (8, 1, 4, 0) in first and (16, 1, 1, 0) in first


def test_register_tiles_always_divide_their_distribution_tiles():
    for levels in (*candidate_levels(CONV, limit=30), *candidate_levels(MATMUL, limit=30)):
        dist, vec = dict(levels)["distribution"], dict(levels)["vector_common_parallel"]
        assert all(v and d % v == 0 and d >= v for d, v in zip(dist, vec) if d), levels
    for levels in candidate_levels(CONV, limit=30):
        dist = dict(levels)["distribution"]
        assert dist[0] == 0 and dist[4:] == (0, 0, 0)   # loops not distributed stay so


def test_only_the_outermost_reduction_is_scaled():
    # the conv window (1, 1) and mmt4d's inner K0 are not the compiler's guess to revisit
    reductions = {dict(c)["vector_reduction"] for c in candidate_levels(CONV, limit=20)}
    assert reductions == {(0, 0, 0, 0, 8, 1, 1), (0, 0, 0, 0, 4, 1, 1), (0, 0, 0, 0, 16, 1, 1)}


def test_the_limit_caps_the_candidates():
    assert len(candidate_levels(CONV, limit=3)) == 3


def test_a_config_is_printed_as_iree_prints_it():
    assert lowering_config(MATMUL) == ("#iree_cpu.lowering_config<distribution = [64, 64, 0], "
                                       "vector_common_parallel = [8, 16, 0], "
                                       "vector_reduction = [0, 0, 16]>")


def test_the_root_ops_config_is_replaced_and_nothing_else():
    root = lowering_config(MATMUL)
    fill = "#iree_cpu.lowering_config<vector_common_parallel = [8, 16]>"
    source = (f"%6 = linalg.fill {{lowering_config = {fill}}} ins(%cst : f32)\n"
              f"%7 = linalg.matmul {{lowering_config = {root}}} ins(%3, %4)\n")
    new = candidate_levels(MATMUL)[0]
    edited = with_levels(source, root, new)
    assert edited == source.replace(root, lowering_config(new))
    assert fill in edited


def test_a_new_register_tile_goes_to_the_fused_ops_that_had_the_roots():
    root = lowering_config(CONV)
    fused = "#iree_cpu.lowering_config<vector_common_parallel = [1, 16, 1, 7]>"
    other = "#iree_cpu.lowering_config<vector_common_parallel = [16, 16]>"
    source = (f"%5 = linalg.generic {{lowering_config = {fused}}}\n"
              f"%6 = linalg.generic {{lowering_config = {root}}}\n"
              f"%7 = linalg.unpack {{lowering_config = {other}}}\n")
    deeper = tuple((n, (1, 16, 1, 14, 0, 0, 0) if n == "vector_common_parallel" else t)
                   for n, t in CONV)
    edited = with_levels(source, root, deeper, CONV)
    assert "vector_common_parallel = [1, 16, 1, 14]>" in edited and fused not in edited
    assert other in edited and lowering_config(deeper) in edited
    # without the old tiles (or with the register tile unchanged) only the root changes
    assert fused in with_levels(source, root, deeper)


def test_an_ambiguous_or_missing_config_is_not_edited():
    root = lowering_config(MATMUL)
    twice = f"{{lowering_config = {root}}}\n{{lowering_config = {root}}}\n"
    assert with_levels(twice, root, CONV) is None
    assert with_levels("no config here", root, CONV) is None


def test_the_digest_covers_names_and_texts_in_any_order():
    a = set_digest({"main_dispatch_1": "x", "main_dispatch_2": "y"})
    assert a == set_digest({"main_dispatch_2": "y", "main_dispatch_1": "x"})
    assert a != set_digest({"main_dispatch_1": "y", "main_dispatch_2": "x"})
    assert a != set_digest({"main_dispatch_1": "x"})


def test_the_flag_takes_a_digest_and_nothing_else():
    digest = set_digest({"main_dispatch_1": "x"})
    assert parse_edgekit_flags((f"--edgekit-dispatch-configs={digest}",)) == {
        "dispatch-configs": digest}
    for bad in ("../../etc", "abc", digest.upper(), digest + "0"):
        with pytest.raises(ValueError, match="edgekit option"):
            parse_edgekit_flags((f"--edgekit-dispatch-configs={bad}",))


def _configured(function: str) -> ConfiguredDispatch:
    return ConfiguredDispatch(executable=function.split("_")[0], function=function,
                              root_name="linalg.generic", levels=MATMUL, lowering_config="",
                              translation_info="", source="")


def test_hot_dispatches_are_ranked_by_measured_time_else_by_flops():
    small, big, copy = (_configured("main_dispatch_1_matmul_8x8x8_f32"),
                        _configured("main_dispatch_2_conv_64x56x56x64x3x3_f32"),
                        _configured("main_dispatch_3_slow_memcpy"))
    measured = {"main_dispatch_1_matmul_8x8x8_f32": 2.0,
                "main_dispatch_2_conv_64x56x56x64x3x3_f32": 0.5,
                "main_dispatch_3_slow_memcpy": 1.0}
    assert hot_dispatches([small, big, copy], measured, 2) == [small, copy]
    # statically: by FLOPs from IREE's names, and a dispatch without a shape is not guessed at
    assert hot_dispatches([small, big, copy], None, 3) == [big, small]


MMT4D = (("distribution", (1, 1, 1, 0, 0, 0, 0)),
         ("vector_common_parallel", (1, 1, 1, 0, 16, 16, 0)),
         ("vector_reduction", (0, 0, 0, 1, 0, 0, 1)))
# ResNet18-like's im2col'd 7x7 convolution: 49 rows (4 tiles) by 4608x512 weights (9.4 MB)
SHAPES = ((1, 4, 4608, 16, 1), (1, 32, 4608, 16, 1), (1, 4, 32, 16, 16))


def test_weights_once_puts_every_lhs_tile_in_a_workgroup_and_keeps_the_rest():
    new = dict(weights_once("linalg.batch_mmt4d", MMT4D, SHAPES))
    assert new["distribution"] == (1, 4, 1, 0, 0, 0, 0)
    # IREE's 1 MiB operand tiles: four column tiles per workgroup -> one
    wide = (("distribution", (1, 1, 4, 0, 0, 0, 0)), *MMT4D[1:])
    assert dict(weights_once("linalg.batch_mmt4d", wide, SHAPES))["distribution"] == \
        (1, 4, 1, 0, 0, 0, 0)
    assert new["vector_common_parallel"] == dict(MMT4D)["vector_common_parallel"]
    plain = tuple((n, s[1:]) for n, s in MMT4D)                  # linalg.mmt4d: no batch loop
    assert dict(weights_once("linalg.mmt4d", plain, tuple(s[1:] for s in SHAPES)))[
        "distribution"] == (4, 1, 0, 0, 0, 0)


@pytest.mark.parametrize("root, levels, shapes, why", [
    ("linalg.generic", MMT4D, SHAPES, "not a data-tiled matmul"),
    ("linalg.batch_mmt4d", MMT4D, ((1, 4, 64, 16, 1), (1, 32, 64, 16, 1), ()), "small weights"),
    ("linalg.batch_mmt4d", MMT4D, ((1, 40, 4608, 16, 1), (1, 32, 4608, 16, 1), ()),
     "640 rows"),
    ("linalg.batch_mmt4d", (("distribution", (1, 4, 1, 0, 0, 0, 0)),), SHAPES, "already so"),
    ("linalg.batch_mmt4d", MMT4D, ((1, 4, 4608, 16, 1), (1, 1, 4608, 16, 1), ()),
     "one column tile"),
    ("linalg.batch_mmt4d", MMT4D, (), "shapes unknown"),
])
def test_weights_once_leaves_what_it_is_not_for(root, levels, shapes, why):
    assert weights_once(root, levels, shapes) is None, why


def test_the_kth_tiles_of_every_dispatch_share_one_build(tmp_path, monkeypatch):
    from edgekit.pipeline.build import Variant
    from edgekit.tune import dispatch_search
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    base = Variant("tosa", "data-tiling", ("--iree-opt-data-tiling",))

    def cand(exe: str, k: int):
        d = ConfiguredDispatch(executable=exe, function=f"{exe}_matmul_8x8x8_f32",
                               root_name="linalg.generic", levels=MATMUL, lowering_config="",
                               translation_info="", source="")
        files = {exe: f"{exe} tiles {k}"}
        return dispatch_search.Candidate(dispatch_search.with_configs(base, files, f"{exe}:{k}"),
                                         d, files, f"{exe}:{k}")
    a0, a1, b0, b1, c0 = cand("d1", 0), cand("d1", 1), cand("d2", 0), cand("d2", 1), cand("d3", 0)
    groups = dispatch_search.shared_builds([a0, a1, b0, b1, c0], base)
    assert [members for _, members in groups] == [[a0, b0, c0], [a1, b1]]
    first, _ = groups[0]
    digest = first.flags[-1].split("=", 1)[1]
    stored = {p.name: p.read_text() for p in (tmp_path / "tuning" / "dispatch-configs" /
                                                digest).iterdir()}
    assert stored == {"d1.mlir": "d1 tiles 0", "d2.mlir": "d2 tiles 0", "d3.mlir": "d3 tiles 0"}
    # a lone candidate keeps its own variant
    assert dispatch_search.shared_builds([a0], base) == [(a0.variant, [a0])]


def test_each_dispatch_a_rule_edits_is_screened_as_a_candidate_of_its_own(tmp_path,
                                                                          monkeypatch):
    from edgekit.pipeline.build import Variant
    from edgekit.tune import dispatch_search
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    base = Variant("tosa", "default", ())
    dispatches = [ConfiguredDispatch(executable=e, function=f"{e}_matmul_8x8x8_f32",
                                     root_name="linalg.batch_matmul", levels=MATMUL,
                                     lowering_config="", translation_info="", source="")
                  for e in ("d1", "d2", "d3")]
    files = {"d1": "d1 two vectors", "d3": "d3 two vectors"}
    rule = dispatch_search.RuleSet(dispatch_search.with_configs(base, files, "two-vector-tiles"),
                                   files, {e: f"{e}_matmul_8x8x8_f32" for e in files})
    both = dispatch_search.RuleSet(dispatch_search.with_configs(base, files, "a+b"), files, {})
    built = [(rule.variant, "rule bundle", "note"), (both.variant, "both bundle", "note")]
    got = dispatch_search.rule_candidates({"two-vector-tiles": rule, "a+b": both}, built,
                                          dispatches)
    # one per edited dispatch, all timed in the rule's own build; combined rules add none
    assert [(c.label, c.files, c.dispatch.executable, b) for c, b in got] == [
        ("d1:two-vector-tiles", {"d1": "d1 two vectors"}, "d1", "rule bundle"),
        ("d3:two-vector-tiles", {"d3": "d3 two vectors"}, "d3", "rule bundle")]
    # a rule that did not build has nothing to screen
    assert dispatch_search.rule_candidates({"two-vector-tiles": rule}, [], dispatches) == []


def test_only_executables_a_bundle_may_carry_are_searched():
    from edgekit.tune.dispatch_search import carriable
    assert carriable("main_dispatch_12")
    # data tiling's pack executables: a bundle's payload names start with a letter or digit
    assert not carriable("_encoding_9") and not carriable("../main_dispatch_1")


def test_a_dispatch_called_several_times_is_rated_per_call_and_costed_per_inference():
    from edgekit.tune.dispatch_search import _rate, costs_of
    # 10 inferences; the 56x56x64x3x3x64 convolution runs twice in each, 1.0 ms at best
    run = {"iterations": 10}
    groups = [{"key": "main_dispatch_4_conv_56x56x64x3x3x64_f32", "min_ns": 1_000_000,
               "count": 20}]
    costs = costs_of(run, groups)
    assert costs["main_dispatch_4_conv_56x56x64x3x3x64_f32"] == pytest.approx(2.0)
    # 231 MFLOP a call: 231 GFLOP/s, not the 116 that dividing one call's FLOPs by both gives
    name = "main_dispatch_4_conv_56x56x64x3x3x64_f32"
    assert _rate(name, 2.0, costs.calls) == "2.000 ms, 2 calls (231 GFLOP/s)"


# the KWS MLP's 256x256 layer as TOSA gives it: a batch-1 matrix-vector product, one vector of
# 16 lanes per reduction step (its operands: 1x1x256 activations, 1x256x256 weights, 1x1x256 out)
MATVEC = (("distribution", (0, 0, 64, 0)), ("vector_common_parallel", (1, 1, 16, 0)),
          ("vector_reduction", (0, 0, 0, 16)))
MATVEC_SHAPES = ((1, 1, 256), (1, 256, 256), (1, 1, 256))


def test_wide_accumulators_give_a_matrix_vector_product_eight_vectors():
    new = dict(wide_accumulators("linalg.batch_matmul", MATVEC, MATVEC_SHAPES))
    assert new["vector_common_parallel"] == (1, 1, 128, 0)
    assert new["distribution"] == (0, 0, 128, 0)        # a multiple of the register tile
    assert new["vector_reduction"] == (0, 0, 0, 16)     # the rest as the compiler chose
    # a 32-lane choice (the 490-deep first layer) widens by whole vectors of its own
    first = (("distribution", (0, 0, 64, 0)), ("vector_common_parallel", (1, 1, 32, 0)),
             ("vector_reduction", (0, 0, 0, 14)))
    assert dict(wide_accumulators("linalg.batch_matmul", first, MATVEC_SHAPES))[
        "vector_common_parallel"] == (1, 1, 128, 0)
    # fewer columns than the lanes: as many whole vectors as fit (no batch loop here)
    plain = tuple((n, s[1:]) for n, s in MATVEC)
    new = dict(wide_accumulators("linalg.matmul", plain, ((1, 490), (490, 80), (1, 80))))
    assert new["vector_common_parallel"] == (1, 80, 0) and new["distribution"] == (0, 80, 0)
    # and the edit reaches the fused fill and bias+ReLU, as IREE tiles them with the root
    source = ('%f = linalg.fill {lowering_config = #iree_cpu.lowering_config<'
              'vector_common_parallel = [1, 1, 16]>}\n'
              f'%m = linalg.batch_matmul {{lowering_config = {lowering_config(MATVEC)}}}\n')
    edited = with_levels(source, lowering_config(MATVEC), wide_accumulators(
        "linalg.batch_matmul", MATVEC, MATVEC_SHAPES), MATVEC)
    assert "vector_common_parallel = [1, 1, 128]>" in edited
    assert "vector_common_parallel = [1, 1, 128, 0]" in edited


@pytest.mark.parametrize("root, levels, shapes, why", [
    ("linalg.batch_matmul", MATVEC, ((1, 4, 256), (1, 256, 256), (1, 4, 256)), "4 rows"),
    ("linalg.batch_mmt4d", MATVEC, MATVEC_SHAPES, "not a plain matmul"),
    ("linalg.batch_matmul", MATVEC, ((1, 1, 256), (1, 256, 12), (1, 1, 12)), "12 columns"),
    ("linalg.batch_matmul", (("distribution", (0, 0, 128, 0)),
                             ("vector_common_parallel", (1, 1, 128, 0))), MATVEC_SHAPES,
     "already so"),
    ("linalg.batch_matmul", MATVEC, (), "shapes unknown"),
    ("linalg.matmul", MATVEC, MATVEC_SHAPES, "loops do not match the operands"),
])
def test_wide_accumulators_leave_what_they_are_not_for(root, levels, shapes, why):
    assert wide_accumulators(root, levels, shapes) is None, why


# MobileNetV2-like's 49x160x960 projection as TOSA and pointwise-as-matmul give it: 7 rows by one
# 16-lane vector of output channels (operands: 1x49x960 activations, 1x960x160 weights, out)
PROJECT = (("distribution", (0, 49, 40, 0)), ("vector_common_parallel", (1, 7, 16, 0)),
           ("vector_reduction", (0, 0, 0, 16)))
PROJECT_SHAPES = ((1, 49, 960), (1, 960, 160), (1, 49, 160))
# its 7x7x960x160 expansion: a matmul-like generic over (h, w, cout, cin)
EXPAND = (("distribution", (7, 7, 64, 0)), ("vector_common_parallel", (1, 7, 16, 0)),
          ("vector_reduction", (0, 0, 0, 16)))
EXPAND_SHAPES = ((7, 7, 160), (160, 960), (7, 7, 960))


def test_two_vector_tiles_double_a_matmuls_register_tile_across_its_channels():
    new = dict(two_vector_tiles("linalg.batch_matmul", PROJECT, PROJECT_SHAPES))
    assert new["vector_common_parallel"] == (1, 7, 32, 0)
    # 40 is no multiple of 32: the next multiple that divides the 160 columns, else 32
    assert new["distribution"] == (0, 49, 32, 0)
    assert new["vector_reduction"] == (0, 0, 0, 16)
    new = dict(two_vector_tiles("linalg.generic", EXPAND, EXPAND_SHAPES))
    assert new["vector_common_parallel"] == (1, 7, 32, 0) and new["distribution"] == (7, 7, 64, 0)
    plain = tuple((n, s[1:]) for n, s in PROJECT)
    assert dict(two_vector_tiles("linalg.matmul", plain, tuple(s[1:] for s in PROJECT_SHAPES)))[
        "vector_common_parallel"] == (7, 32, 0)


@pytest.mark.parametrize("root, levels, shapes, why", [
    ("linalg.batch_matmul", MATVEC, MATVEC_SHAPES, "a matrix-vector product (one row)"),
    ("linalg.batch_matmul", PROJECT, ((1, 49, 960), (1, 960, 24), (1, 49, 24)), "24 columns"),
    ("linalg.batch_matmul", (("distribution", (0, 49, 64, 0)),
                             ("vector_common_parallel", (1, 7, 32, 0)),
                             ("vector_reduction", (0, 0, 0, 16))),
     ((1, 49, 320), (1, 320, 1280), (1, 49, 1280)),
     "already two vectors: 64 lanes by 7 rows would spill"),
    ("linalg.generic", CONV, ((1, 30, 30, 8), (3, 3, 8, 28), (1, 28, 28, 28)), "a convolution"),
    ("linalg.batch_mmt4d", PROJECT, PROJECT_SHAPES, "data-tiled: the layout's tile"),
    ("linalg.batch_matmul", (("distribution", (0, 64, 64, 0)),
                             ("vector_common_parallel", (1, 16, 16, 0)),
                             ("vector_reduction", (0, 0, 0, 16))), PROJECT_SHAPES,
     "16 rows: 32 accumulators would spill"),
    ("linalg.batch_matmul", PROJECT, (), "shapes unknown"),
])
def test_two_vector_tiles_leave_what_they_are_not_for(root, levels, shapes, why):
    assert two_vector_tiles(root, levels, shapes) is None, why
