"""Stages declare what they consume and produce; a plan is checked before anything runs.

A stage is a named, typed step `run(context, value) -> value`. `check_plan` proves that each
stage consumes what the one before produces, so a wrongly assembled pipeline fails at once
instead of after a minute of compiling. A stage may finish a plan early (`finishes`: the build
cache answered), and a plan is edited by stage name (`edit_plan`: what an NPU family adds).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Ctx = TypeVar("Ctx")


@dataclass(frozen=True)
class Stage(Generic[Ctx]):
    name: str
    consumes: type
    produces: type
    run: Callable[[Ctx, Any], Any]
    # a value of this type (the plan's end type) returned instead of `produces` ends the plan
    finishes: type | None = None

    def within(self, context_of: Callable[[Any], Any]) -> "Stage":
        """The same stage in a plan with a larger context, from which `context_of` takes its
        own (the CPU FRONT/BACK stages inside `edgekit build`'s whole plan)."""
        run = self.run
        return Stage(self.name, self.consumes, self.produces,
                     lambda ctx, value: run(context_of(ctx), value), self.finishes)


class PlanError(TypeError):
    """A programming error: stages assembled in an order whose types do not chain."""


def check_plan(stages: Sequence[Stage], start: type, end: type) -> None:
    current = start
    for stage in stages:
        if not issubclass(current, stage.consumes):
            raise PlanError(f"stage '{stage.name}' consumes {stage.consumes.__name__} but the "
                            f"plan gives it {current.__name__}")
        if stage.finishes is not None and not issubclass(stage.finishes, end):
            raise PlanError(f"stage '{stage.name}' may finish the plan with "
                            f"{stage.finishes.__name__}, expected {end.__name__}")
        current = stage.produces
    if not issubclass(current, end):
        raise PlanError(f"plan ends with {current.__name__}, expected {end.__name__}")


def run_plan(stages: Sequence[Stage], context, value, timings: dict[str, float],
             on_stage: Callable[[str], None] | None = None):
    """Run checked stages in order, recording each one's wall time in `timings`."""
    for stage in stages:
        if on_stage:
            on_stage(stage.name)
        started = time.perf_counter()
        value = stage.run(context, value)
        timings[stage.name] = round(time.perf_counter() - started, 3)
        if stage.finishes is not None and isinstance(value, stage.finishes):
            return value
        if not isinstance(value, stage.produces):
            raise PlanError(f"stage '{stage.name}' returned {type(value).__name__}, "
                            f"declared {stage.produces.__name__}")
    return value


@dataclass(frozen=True)
class Edit:
    """One change to a plan, by stage name: `replace` the stages from `at` through `through`
    (default: `at` alone) with `stages`; `before`/`after` insert `stages` beside `at`."""

    how: str                        # replace | before | after
    at: str
    stages: tuple[Stage, ...]
    through: str | None = None


def edit_plan(stages: Sequence[Stage], edits: Sequence[Edit]) -> tuple[Stage, ...]:
    """The plan with `edits` applied in order; an edit naming a stage the plan lacks is a
    PlanError (a family written against another plan)."""
    plan = list(stages)
    for edit in edits:
        names = [s.name for s in plan]
        for name in (edit.at, edit.through or edit.at):
            if name not in names:
                raise PlanError(f"no stage '{name}' to {edit.how} (stages: {', '.join(names)})")
        first, last = names.index(edit.at), names.index(edit.through or edit.at)
        if edit.how == "replace" and first <= last:
            plan[first:last + 1] = edit.stages
        elif edit.how == "before":
            plan[first:first] = edit.stages
        elif edit.how == "after":
            plan[first + 1:first + 1] = edit.stages
        else:
            raise PlanError(f"cannot {edit.how} at '{edit.at}'"
                            + (f" through '{edit.through}'" if edit.through else ""))
    return tuple(plan)
