"""Mixed precision by measured error, the pure rules: ranking layers by the error each adds,
which candidates to build, the frontier, the choice; and the recipe keys that ask for it."""

import pytest

from edgekit.config.recipe import LayerError, load_recipe
from edgekit.errors import ConfigError
from edgekit.pipeline.quantize.search import (Measured, choose, enough, float_counts, frontier,
                                              rank_layers)


def test_layers_are_ranked_by_the_error_they_add_not_the_error_they_were_fed():
    # conv1 is fine, conv2 ruins its output, the head only carries conv2's error on
    errors = [LayerError(layer="conv1", cosine=0.999), LayerError(layer="conv2", cosine=0.60),
              LayerError(layer="head", cosine=0.55), LayerError(layer="odd", cosine=None)]
    ranked = rank_layers(errors)
    assert [e.layer for e in ranked] == ["conv2", "head", "conv1", "odd"]
    assert ranked[0].added == pytest.approx(0.399)
    assert ranked[1].added == pytest.approx(0.05)
    assert ranked[-1].added is None           # no defined cosine: ranked last, not dropped


def test_candidates_never_keep_every_layer_float_and_stop_one_after_the_first_that_meets():
    assert float_counts(3, max_float=4) == [0, 1, 2]
    assert float_counts(10, max_float=2) == [0, 1, 2]
    assert float_counts(1, max_float=4) == [0]
    over, met, more = (Measured("int8", (), 0.2, 0.7), Measured("k1", ("a",), 0.9, 0.0),
                       Measured("k2", ("a", "b"), 0.9, 0.0))
    assert not enough([over], 0.01)
    assert not enough([over, met], 0.01) and enough([over, met], 0.01, beyond=0)
    assert enough([over, met, more], 0.01)


def _m(name, k, drop, p50, quantized=True):
    return Measured(name, tuple(f"l{i}" for i in range(k)), 1 - drop, drop, p50, quantized)


def test_the_choice_is_the_fastest_within_max_drop_and_never_the_float_model():
    fp32 = _m("fp32", 0, 0.0, 1.0, quantized=False)
    int8 = _m("int8", 0, 0.30, 0.40)          # fastest, over max_drop
    k1 = _m("k1", 1, 0.02, 0.50)              # over max_drop
    k2 = _m("k2", 2, 0.005, 0.60)
    k3 = _m("k3", 3, 0.001, 0.55)             # clearly faster than k2 (8 %)
    assert choose([fp32, int8, k1, k2, k3], max_drop=0.01) is k3
    assert choose([fp32, int8, k1], max_drop=0.01) is None
    assert choose([fp32, int8], max_drop=1.0) is int8
    # a NaN score's drop never meets the limit
    assert choose([_m("nan", 0, float("nan"), 0.1)], max_drop=1.0) is None


def test_p50s_within_the_bar_are_a_tie_won_by_fewer_float_layers():
    k1 = _m("k1", 1, 0.0, 0.0135)
    k2 = _m("k2", 2, -0.01, 0.01349)          # 0.07 % faster: noise
    assert choose([k2, k1], max_drop=0.02) is k1
    untimed = [_m("k2", 2, 0.0, None), _m("k1", 1, 0.0, None)]
    assert choose(untimed, max_drop=0.02).name == "k1"


def test_the_frontier_holds_what_nothing_beats_on_both_speed_and_drop():
    fp32 = _m("fp32", 0, 0.0, 1.0, quantized=False)
    int8 = _m("int8", 0, 0.30, 0.40)
    k1 = _m("k1", 1, 0.02, 0.50)
    slow = _m("slow", 2, 0.05, 0.70)          # slower and worse than k1
    assert [m.name for m in frontier([fp32, int8, k1, slow])] == ["fp32", "int8", "k1"]
    assert len(frontier([int8, _m("untimed", 1, 0.0, None)])) == 2


@pytest.mark.parametrize("quantize, validation, says", [
    ("{mode: int8, calibration: c.npz, max_drop: 0.01}", "{top1: always}",
     ":5: quantize: `max_drop` is a drop of the dataset score"),
    ("{mode: int8, calibration: c.npz, max_drop: 2}",
     "{dataset: {samples: s.npz, labels: l.npy}}",
     "quantize.max_drop: Input should be less than or equal to 1"),
    ("{mode: fp16, keep_float: [fc2]}", "{top1: always}",
     "`keep_float` chooses layers to keep in float in an int8 build (mode is fp16)"),
])
def test_bad_mixed_precision_keys_are_one_line_with_file_line_and_key(tmp_path, quantize,
                                                                       validation, says):
    (tmp_path / "m.py").write_text("")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"name: r\nmodel:\n  python: m.py:f\nvalidation: {validation}\n"
                      f"quantize: {quantize}\n")
    with pytest.raises(ConfigError) as err:
        load_recipe(recipe)
    assert says in str(err.value) and str(recipe) in str(err.value)
    assert "\n" not in str(err.value).split(" (hint")[0]


def _searched(measured_on="host", refused=(), candidates=None):
    from edgekit.api.quantize import SearchResult
    candidates = candidates if candidates is not None else (
        _m("fp32", 0, 0.0, 1.0, quantized=False), _m("int8", 0, 0.30, 0.40),
        _m("int8 + 1 float", 1, 0.0, 0.5))
    return SearchResult(app="digits", target="rpi4", metric="top1", max_drop=0.02,
                        reference_score=0.97, layers=(), candidates=candidates,
                        chosen=choose(candidates, 0.02), measured_on=measured_on,
                        refused=refused)


def test_a_search_on_a_device_says_where_it_measured_and_what_the_device_refused():
    from rich.console import Console

    from edgekit.cli.quantize import search_json, search_lines
    found = _searched("pi-1 (pi@192.0.2.10:22)", (("int8 + 2 float", "output_0: cosine 0.2"),))
    console = Console(width=200, color_system=None, record=True)
    for line in search_lines(found):
        console.print(line)
    text = console.export_text()
    assert "candidates for rpi4, measured on pi-1 (pi@192.0.2.10:22)" in text
    assert "refused on pi-1 (pi@192.0.2.10:22): int8 + 2 float: output_0: cosine 0.2" in text
    as_json = search_json(found)
    assert as_json["measured_on"] == "pi-1 (pi@192.0.2.10:22)"
    assert as_json["refused"] == [{"name": "int8 + 2 float", "problems": "output_0: cosine 0.2"}]
    # what a build of the choice records: the device it was measured on
    assert found.summary().measured_on == "pi-1 (pi@192.0.2.10:22)"
    assert _searched().summary().measured_on == "rpi4"           # on this machine: the target


def test_a_search_whose_every_candidate_the_device_refused_is_one_line():
    from pathlib import Path

    from edgekit.api.quantize import refuse_unmet
    from edgekit.errors import QuantizationError
    found = _searched("pi-1", (("int8", "output_0: cosine 0.1"),),
                      candidates=(_m("fp32", 0, 0.0, 1.0, quantized=False),))
    with pytest.raises(QuantizationError) as err:
        refuse_unmet(found, Path("r.yaml"))
    assert str(err.value).splitlines()[0] == ("r.yaml (quantize.max_drop): int8: every "
                                              "candidate was refused on pi-1 (first: int8: "
                                              "output_0: cosine 0.1)")
    assert err.value.exit_code == 18
