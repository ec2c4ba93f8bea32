import pytest

from edgekit.pipeline.build import BACK, FRONT, PLAN
from edgekit.pipeline.stages import Edit, PlanError, Stage, check_plan, edit_plan, run_plan


def test_the_build_plan_chains_from_recipe_to_bundle():
    names = [s.name for s in FRONT + BACK]
    assert names == ["load", "export", "quantize", "check golden", "rewrite", "import",
                     "lower+compile", "check quantization", "compile variants", "package"]


def test_the_whole_plan_keys_and_consults_the_cache_between_front_and_back():
    names = [s.name for s in PLAN]
    assert names == [*(s.name for s in FRONT), "build key", "cache", *(s.name for s in BACK),
                     "dataset", "store"]


def test_a_stage_that_finishes_the_plan_skips_the_rest():
    ran = []
    hit = Stage("cache", int, int, lambda ctx, v: "hit" if v == 1 else v, finishes=str)
    rest = Stage("compile", int, str, lambda ctx, v: ran.append(v) or str(v * 10))
    check_plan([hit, rest], int, str)
    timings: dict[str, float] = {}
    assert run_plan([hit, rest], None, 1, timings) == "hit" and ran == [] and \
        list(timings) == ["cache"]
    assert run_plan([hit, rest], None, 2, {}) == "20" and ran == [2]
    with pytest.raises(PlanError, match="may finish the plan with str, expected int"):
        check_plan([hit, rest, Stage("len", str, int, lambda ctx, v: len(v))], int, int)


def test_a_plan_is_edited_by_stage_name():
    a, b, c = (Stage(n, int, int, lambda ctx, v: v) for n in "abc")
    x, y = (Stage(n, int, int, lambda ctx, v: v) for n in "xy")
    names = lambda plan: "".join(s.name for s in plan)   # noqa: E731
    assert names(edit_plan([a, b, c], [Edit("replace", "b", (x,))])) == "axc"
    assert names(edit_plan([a, b, c], [Edit("replace", "a", (x, y), through="b")])) == "xyc"
    assert names(edit_plan([a, b, c], [Edit("before", "a", (x,)),
                                       Edit("after", "c", (y,))])) == "xabcy"
    with pytest.raises(PlanError, match="no stage 'q' to after"):
        edit_plan([a, b, c], [Edit("after", "q", (x,))])


def test_a_plan_whose_types_do_not_chain_is_refused_before_running():
    ran = []
    to_str = Stage("to_str", int, str, lambda ctx, v: ran.append(v) or str(v))
    to_len = Stage("to_len", str, int, lambda ctx, v: len(v))
    check_plan([to_str, to_len], int, int)
    with pytest.raises(PlanError, match="'to_len' consumes str but the plan gives it int"):
        check_plan([to_len, to_str], int, str)
    assert ran == []


def test_running_a_plan_times_each_stage_and_checks_what_it_returns():
    timings: dict[str, float] = {}
    liar = Stage("liar", int, str, lambda ctx, v: v)
    with pytest.raises(PlanError, match="returned int"):
        run_plan([liar], None, 3, timings)
    ok = Stage("ok", int, str, lambda ctx, v: str(v))
    assert run_plan([ok], None, 3, timings) == "3" and "ok" in timings
