"""Events of a fleet rollout: what its journal records, one JSON line each, and what progress
callbacks receive. One class per kind, told apart by `event` (the JSONL key journals have
always used, so journals written before these classes read back unchanged)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import pydantic

from edgekit.config.schema_base import Frozen


def _now() -> float:
    return round(time.time(), 3)


class _Event(Frozen):
    ts: float = pydantic.Field(default_factory=_now)


class BuildStarted(_Event):
    """Building the recipe for one target profile (progress only: not journaled)."""

    event: Literal["build"] = "build"
    target: str


class DevicePreflight(_Event):
    """Before the builds: a device answered and can run its target, or not and why (progress
    only: not journaled; a device that failed here fails again in its wave)."""

    event: Literal["preflight"] = "preflight"
    device: str
    ok: bool
    reason: str = ""


class RolloutStarted(_Event):
    event: Literal["start"] = "start"
    rollout: str
    waves: tuple[tuple[str, ...], ...]


class RolloutResumed(_Event):
    event: Literal["resume"] = "resume"
    rollout: str


class WaveStarted(_Event):
    event: Literal["wave-start"] = "wave-start"
    wave: int                                   # 1-based
    devices: tuple[str, ...]


class DeviceStarted(_Event):
    event: Literal["device-start"] = "device-start"
    device: str
    wave: int
    previous: str | None                        # current release before the rollout


class DeviceStep(_Event):
    event: Literal["device-step"] = "device-step"
    device: str
    step: str                                   # a deploy stage: preflight, upload, …


class DeviceDone(_Event):
    event: Literal["device-done"] = "device-done"
    device: str
    wave: int
    status: Literal["updated", "unchanged", "failed"]
    reason: str = ""
    failure: str = ""                           # error class: DeviceUnreachable, …
    previous: str | None = None
    seconds: float = 0.0
    p90_before_ms: float | None = None
    p90_after_ms: float | None = None
    # the latency gate's decision figure: the median of the per-round p90 ratios (new / the
    # replaced release), their range over the rounds (its noise), and the limit it had
    p90_ratio: float | None = None
    p90_ratio_range: tuple[float, float] | None = None
    p90_ratio_limit: float | None = None
    # the dataset gate's score on this device (metric, reference_score, measured, drop,
    # samples), where it ran: the first wave, or every wave with `everywhere`
    dataset: dict | None = None


class WaveDone(_Event):
    event: Literal["wave-done"] = "wave-done"
    wave: int
    failed: int
    halted: bool


class Halted(_Event):
    event: Literal["halt"] = "halt"
    wave: int
    rollback: Literal["none", "wave", "all"]
    reason: str


class DeviceRolledBack(_Event):
    event: Literal["device-rollback"] = "device-rollback"
    device: str
    status: Literal["rolled-back", "rollback-failed"]
    to: str | None
    reason: str = ""


class JournalRepaired(_Event):
    """The journal's last line was torn (a crash while writing it): set aside in a file beside
    the journal before anything more was appended."""

    event: Literal["journal-repaired"] = "journal-repaired"
    set_aside: str                              # file name, beside journal.jsonl
    bytes: int


class Interrupted(_Event):
    event: Literal["interrupted"] = "interrupted"


class Finished(_Event):
    event: Literal["finished"] = "finished"
    status: Literal["completed", "halted"]


class AlreadyFinished(_Event):
    """`fleet resume` of a rollout that had finished: nothing is run again; its result is
    the journal's (progress only: not journaled)."""

    event: Literal["already-finished"] = "already-finished"
    rollout: str
    status: Literal["completed", "halted"]


RolloutEvent = Annotated[
    BuildStarted | DevicePreflight | RolloutStarted | RolloutResumed | WaveStarted
    | DeviceStarted | DeviceStep
    | DeviceDone | WaveDone | Halted | DeviceRolledBack | JournalRepaired | Interrupted
    | Finished | AlreadyFinished,
    pydantic.Field(discriminator="event")]

EVENTS: pydantic.TypeAdapter[RolloutEvent] = pydantic.TypeAdapter(RolloutEvent)


def parse_event(line: str) -> RolloutEvent:
    """One journal line → its event (pydantic.ValidationError if it is not one)."""
    return EVENTS.validate_json(line)
