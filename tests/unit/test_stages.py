import pytest

from edgekit.pipeline.build import BACK, FRONT
from edgekit.pipeline.stages import PlanError, Stage, check_plan, run_plan


def test_the_build_plan_chains_from_recipe_to_bundle():
    names = [s.name for s in FRONT + BACK]
    assert names == ["load", "export", "quantize", "check golden", "rewrite", "import",
                     "lower+compile", "check quantization", "compile variants", "npu", "package"]


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
