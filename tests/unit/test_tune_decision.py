"""`edgekit tune`'s decisions, as pure logic: which runtime times the candidates, and which
candidate a thread budget gets (never one that is not clearly faster than the untuned build)."""

import pytest

from edgekit.config.profiles import load_target
from edgekit.errors import ConfigError
from edgekit.models.bundle import TuningNote
from edgekit.tune.measure import measuring_runtime
from edgekit.config.recipe import load_recipe
from edgekit.tune.tuner import (CandidateResult, choose, confirmation, kept_refinement,
                                near_miss, runtime_choice)


def result(rounds, flag_set="x", threads=1, lowering="tosa"):
    ordered = sorted(rounds)
    return CandidateResult(lowering=lowering, flag_set=flag_set, flags=(), threads=threads,
                           status="ok", p50_ms=ordered[len(ordered) // 2],
                           round_p50_ms=tuple(rounds))


def test_a_two_thread_budget_runs_one_thread_when_that_is_clearly_faster():
    # the KWS MLP: the task system costs more than a second worker saves
    untuned_2t = result((0.20, 0.21, 0.19, 0.20, 0.22), "default", threads=2)
    untuned_1t = result((0.030, 0.031, 0.029, 0.030, 0.032), "default", threads=1)
    chosen, reference = choose([untuned_2t, untuned_1t], "tosa/default")
    assert reference is untuned_2t          # what a build without tuning runs with 2 threads
    assert chosen is untuned_1t


def test_the_untuned_build_at_the_whole_budget_is_the_reference_and_wins_ties():
    untuned_2t = result((10.0, 10.1, 9.9, 10.0, 10.2), "default", threads=2)
    # 2% faster at one thread: inside the 3% margin, so not worth a change
    close_1t = result((9.8, 9.9, 9.7, 9.8, 10.0), "data-tiling", threads=1)
    assert choose([close_1t, untuned_2t], "tosa/default") == (untuned_2t, untuned_2t)


def test_a_one_thread_budget_compares_with_the_untuned_build_at_one_thread():
    untuned_2t = result((20.0,) * 5, "default", threads=2)
    untuned_1t = result((10.0, 10.0, 10.0, 10.0, 10.0), "default", threads=1)
    fast_2t = result((5.0,) * 5, "data-tiling", threads=2)
    fast_1t = result((8.0, 8.1, 7.9, 8.0, 8.0), "data-tiling", threads=1)
    pool = [untuned_2t, untuned_1t, fast_2t, fast_1t]
    assert choose(pool, "tosa/default", budget=1) == (fast_1t, untuned_1t)
    assert choose(pool, "tosa/default", budget=2) == (fast_2t, untuned_2t)
    assert choose(pool, "tosa/default") == (fast_2t, untuned_2t)


def test_the_lowest_median_is_not_taken_when_its_rounds_do_not_clearly_beat_the_untuned():
    untuned = result((10.0, 10.0, 10.0, 10.0, 10.0), "default")
    # the lowest median, but faster in three rounds of five only: not round by round
    lucky = result((5.0, 12.0, 5.0, 12.0, 5.0), "lucky")
    steady = result((8.0, 8.1, 7.9, 8.0, 8.0), "steady")
    assert choose([untuned, lucky, steady], "tosa/default") == (steady, untuned)
    assert choose([untuned, lucky], "tosa/default") == (untuned, untuned)


def test_without_an_untuned_build_among_the_valid_the_fastest_is_chosen():
    a, b = result((3.0,) * 3, "a", lowering="linalg"), result((2.0,) * 3, "b", lowering="linalg")
    assert choose([a, b], "tosa/default") == (b, None)


def test_the_measuring_runtime_follows_where_the_bundle_runs():
    host, rpi4 = load_target("host"), load_target("rpi4")
    assert measuring_runtime("auto", host, None) == "in-process"
    assert measuring_runtime("auto", host, "local:/tmp/d") == "tools"
    assert measuring_runtime("auto", rpi4, "pi@10.0.0.2") == "tools"
    assert measuring_runtime("tools", host, None) == "tools"
    assert measuring_runtime("in-process", host, None) == "in-process"
    assert host.tune.runtime == "auto"


def test_the_measuring_runtime_is_the_options_then_the_recipes_then_the_profiles(tmp_path):
    host = load_target("host").model_copy(update={"tune": load_target("host").tune.model_copy(
        update={"runtime": "tools"})})
    (tmp_path / "m.py").write_text("")
    plain = tmp_path / "plain.yaml"
    plain.write_text('model:\n  python: "m.py:f"\n')
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text('model:\n  python: "m.py:f"\ntune:\n  runtime: in-process\n')
    assert runtime_choice(None, load_recipe(plain), host) == "tools"          # the profile's
    assert runtime_choice(None, load_recipe(pinned), host) == "in-process"    # the recipe's
    assert runtime_choice("auto", load_recipe(pinned), host) == "auto"        # the option's
    # not part of the build: the same cache key with or without it
    assert "tune" not in load_recipe(pinned).model_dump(mode="json")


def test_a_bad_recipe_runtime_names_its_file_line_and_key(tmp_path):
    (tmp_path / "m.py").write_text("")
    bad = tmp_path / "bad.yaml"
    bad.write_text('model:\n  python: "m.py:f"\ntune:\n  runtime: gpu\n')
    with pytest.raises(ConfigError) as caught:
        load_recipe(bad)
    assert "bad.yaml:4" in str(caught.value.where) and caught.value.key == "tune.runtime"
    assert "in-process" in caught.value.what


def test_a_measuring_runtime_that_cannot_time_the_bundle_is_refused_with_a_hint():
    host, rpi4 = load_target("host"), load_target("rpi4")
    with pytest.raises(ConfigError) as caught:
        measuring_runtime("in-process", host, "pi@10.0.0.2")
    assert caught.value.key == "runtime" and "--runtime tools" in caught.value.hint
    with pytest.raises(ConfigError) as caught:
        measuring_runtime("in-process", rpi4, None)
    assert "--host" in caught.value.hint
    with pytest.raises(ConfigError) as caught:
        measuring_runtime("fastest", host, None)
    assert "in-process" in caught.value.hint


def test_a_profile_names_its_measuring_runtime_and_a_wrong_one_points_at_its_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("extends: host\ntune:\n  runtime: tools\n")
    assert load_target(str(path)).tune.runtime == "tools"
    path.write_text("extends: host\ntune:\n  runtime: python\n")
    with pytest.raises(ConfigError) as caught:
        load_target(str(path))
    assert caught.value.where.endswith("t.yaml:3")


def test_a_tuning_note_from_before_the_runtime_choice_reads_as_tools():
    note = TuningNote.model_validate({
        "variant": "tosa/default", "lowering": "tosa", "flag_set": "default", "flags": [],
        "threads": 1, "p50_ms": 1.0, "measured_on": "host", "tuned_at": "2026-11-30"})
    assert note.measured_in == "tools"


def test_the_tune_table_names_the_runtime_and_the_reference_a_fewer_threads_choice_beat(
        monkeypatch):
    import io

    from rich.console import Console

    from edgekit.cli import render
    from edgekit.cli.tune import tuning_table
    from edgekit.tune.tuner import TuningRecord
    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=100, color_system=None))
    untuned_2t = result((0.20, 0.21, 0.19, 0.20, 0.22), "default", threads=2)
    untuned_1t = result((0.030, 0.031, 0.029, 0.030, 0.032), "default", threads=1)
    chosen, reference = choose([untuned_2t, untuned_1t], "tosa/default")
    tuning_table(TuningRecord(
        model_digest="d", app="kws-mlp", target="host", toolchain={}, measured_on="host",
        created_at="now", chosen=chosen, default_variant="tosa/default",
        default_p50_ms=reference.p50_ms, candidates=(untuned_1t, untuned_2t),
        fastest="tosa/default (1t)", gain_pct=85.0, noise_pct=0.1, measured_in="in-process"))
    text = " ".join(buffer.getvalue().split())
    assert "(measured on host, in-process)" in text
    assert "chosen: tosa/default at 1 thread(s)" in text
    assert "faster than the untuned tosa/default at 2 thread(s)" in text


# --- a search step's refinement: kept only when clearly faster, after a second look if close ---

def test_a_near_miss_gets_a_second_look_and_is_kept_on_all_the_rounds():
    chosen = result((10.0,) * 5, "chosen")
    base = result((10.0, 10.1, 9.9, 10.0, 10.2), "chosen")
    # 2.5 % faster in this step's rounds: below the 3 % bar
    tiles = result((9.75, 9.85, 9.65, 9.75, 9.95), "chosen+tiles")
    asked = []

    def second_look(names):
        asked.append(names)
        return [result((10.0, 10.0, 10.1, 9.9, 10.0, 10.0, 10.1), "chosen"),
                result((9.4, 9.4, 9.5, 9.3, 9.4, 9.4, 9.5), "chosen+tiles")]
    said = []
    assert kept_refinement(chosen, base, [tiles], said.append, second_look) is tiles
    assert asked == [["tosa/chosen", "tosa/chosen+tiles"]]
    assert said[0].startswith("a second look for") and said[-1].startswith("kept")
    assert "12 rounds" in said[-1]


def test_a_second_look_that_confirms_the_tie_keeps_the_chosen_variant():
    chosen = result((10.0,) * 5, "chosen")
    base = result((10.0, 10.1, 9.9, 10.0, 10.2), "chosen")
    tiles = result((9.75, 9.85, 9.65, 9.75, 9.95), "chosen+tiles")
    tie = [result((10.0, 10.1, 9.9, 10.0, 10.0), "chosen"),
           result((10.0, 10.0, 10.0, 10.1, 9.9), "chosen+tiles")]
    assert kept_refinement(chosen, base, [tiles], None, lambda names: tie) is chosen
    failed = tiles.model_copy(update={"status": "bench-failed", "p50_ms": None,
                                      "round_p50_ms": (), "reason": "it crashed"})
    said = []
    assert kept_refinement(chosen, base, [tiles], said.append,
                           lambda names: [tie[0], failed]) is chosen
    assert said[-1] == "not kept: tosa/chosen+tiles: it crashed"


def test_only_a_close_win_is_looked_at_twice():
    base = result((10.0, 10.1, 9.9, 10.0, 10.2), "base")
    assert near_miss(result((9.75, 9.85, 9.65, 9.75, 9.95), "close"), base)     # +2.5 %
    assert not near_miss(result((9.0, 9.1, 8.9, 9.0, 9.2), "clear"), base)      # kept at once
    assert not near_miss(result((9.95, 10.05, 9.85, 9.95, 10.15), "tie"), base)  # +0.5 %
    assert not near_miss(result((9.0, 11.0, 11.0, 11.0, 9.0), "worse"), base)   # loses 3 of 5


# --- the winner confirmed in fresh rounds: a win that does not repeat is refused ---------------

def test_a_win_that_repeats_in_fresh_rounds_is_kept_and_the_record_says_so():
    untuned = result((10.0, 10.1, 9.9, 10.0, 10.2), "default")
    winner = result((8.0, 8.1, 7.9, 8.0, 8.0), "data-tiling")
    kept, note = confirmation(winner, untuned,
                              result((8.1, 8.0, 8.2, 7.9, 8.1), "data-tiling"),
                              result((10.1, 10.0, 10.2, 9.9, 10.0), "default"))
    assert kept is winner          # its row as the record lists it
    assert note.startswith("win repeated: tosa/data-tiling (1t) against the untuned "
                           "tosa/default (1t)")
    assert "-19." in note and "5 fresh rounds (faster in 5)" in note


def test_a_win_from_a_noisy_window_that_does_not_repeat_keeps_the_untuned_build():
    # the KWS MLP, issue 37: chosen on a clear first-stage win, tied with the untuned build
    # (and slower in three rounds of five) when measured again
    untuned = result((0.030, 0.031, 0.029, 0.030, 0.032), "default")
    winner = result((0.026, 0.026, 0.025, 0.027, 0.026), "data-tiling")
    assert choose([untuned, winner], "tosa/default") == (winner, untuned)
    kept, note = confirmation(winner, untuned,
                              result((0.031, 0.030, 0.032, 0.029, 0.031), "data-tiling"),
                              result((0.030, 0.031, 0.030, 0.030, 0.030), "default"))
    assert kept is untuned
    assert note.startswith("win not repeated: tosa/data-tiling (1t)")
    assert note.endswith("within noise; the untuned build is kept")


def test_a_win_that_holds_in_only_some_fresh_rounds_is_not_repeated():
    untuned = result((10.0,) * 5, "default")
    winner = result((8.0,) * 5, "data-tiling")
    # the median says 20 % faster, but three of five rounds do not agree: not one rule's win
    kept, note = confirmation(winner, untuned, result((8.0, 8.0, 10.5, 10.5, 10.5),
                                                      "data-tiling"),
                              result((10.0,) * 5, "default"))
    assert kept is untuned and note.startswith("win not repeated")


def test_a_fewer_threads_winner_is_confirmed_against_the_untuned_build_at_the_budget():
    untuned_2t = result((0.20, 0.21, 0.19, 0.20, 0.22), "default", threads=2)
    untuned_1t = result((0.030, 0.031, 0.029, 0.030, 0.032), "default", threads=1)
    kept, note = confirmation(untuned_1t, untuned_2t,
                              result((0.031, 0.030, 0.030, 0.029, 0.031), "default", threads=1),
                              result((0.19, 0.20, 0.22, 0.20, 0.21), "default", threads=2))
    assert kept is untuned_1t
    assert "tosa/default (1t) against the untuned tosa/default (2t)" in note


def test_a_failed_or_missing_re_measurement_keeps_the_untuned_build():
    untuned = result((10.0,) * 5, "default")
    winner = result((8.0,) * 5, "data-tiling")
    crashed = winner.model_copy(update={"status": "bench-failed", "p50_ms": None,
                                        "round_p50_ms": (), "reason": "it crashed"})
    kept, note = confirmation(winner, untuned, crashed, untuned)
    assert kept is untuned
    assert note.endswith("the re-measurement failed (bench-failed it crashed)")
    kept, note = confirmation(winner, untuned, winner, None)
    assert kept is untuned and note.endswith("(missing)")


def test_the_tune_table_says_when_a_win_was_not_repeated(monkeypatch):
    import io

    from rich.console import Console

    from edgekit.cli import render
    from edgekit.cli.tune import tuning_table
    from edgekit.tune.tuner import TuningRecord
    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=100, color_system=None))
    untuned = result((10.0, 10.1, 9.9, 10.0, 10.2), "default")
    winner = result((8.0, 8.1, 7.9, 8.0, 8.0), "data-tiling")
    kept, note = confirmation(winner, untuned, result((10.0,) * 5, "data-tiling"),
                              result((10.0,) * 5, "default"))
    tuning_table(TuningRecord(
        model_digest="d", app="kws-mlp", target="host", toolchain={}, measured_on="host",
        created_at="now", chosen=kept, default_variant="tosa/default",
        default_p50_ms=untuned.p50_ms, candidates=(winner, untuned),
        fastest="tosa/data-tiling (1t)", gain_pct=20.0, noise_pct=0.5,
        measured_in="in-process", confirmation=note))
    text = " ".join(buffer.getvalue().split())
    assert "chosen: tosa/default at 1 thread(s)" in text
    assert "(the untuned build: win not repeated: tosa/data-tiling (1t)" in text


def test_a_record_from_before_the_confirmation_still_loads():
    from edgekit.tune.tuner import TuningRecord
    untuned = result((10.0,) * 3, "default")
    record = TuningRecord(
        model_digest="d", app="a", target="host", toolchain={}, measured_on="host",
        created_at="now", chosen=untuned, default_variant="tosa/default",
        default_p50_ms=10.0, candidates=(untuned,)).model_dump(mode="json")
    del record["confirmation"]
    assert TuningRecord.model_validate(record).confirmation == ""
