"""Stages declare what they consume and produce; a plan is checked before anything runs.

A stage is a named, typed step `run(context, value) -> value`. `check_plan` proves that each
stage consumes what the one before produces, so a wrongly assembled pipeline fails at once
instead of after a minute of compiling.
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


class PlanError(TypeError):
    """A programming error: stages assembled in an order whose types do not chain."""


def check_plan(stages: Sequence[Stage], start: type, end: type) -> None:
    current = start
    for stage in stages:
        if not issubclass(current, stage.consumes):
            raise PlanError(f"stage '{stage.name}' consumes {stage.consumes.__name__} but the "
                            f"plan gives it {current.__name__}")
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
        if not isinstance(value, stage.produces):
            raise PlanError(f"stage '{stage.name}' returned {type(value).__name__}, "
                            f"declared {stage.produces.__name__}")
    return value
