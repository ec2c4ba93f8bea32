"""The rollout's local journal: an append-only JSON-lines file, one event per step per device,
flushed and fsync'd as it is written, so a crash loses at most the step in flight. Replaying
it gives the rollout's state (what a resume continues from) and its result (what the report
shows), in one place.

Rollouts live in $EDGEKIT_HOME/fleet/<id>/: plan.json, journal.jsonl, bundles/<target>/.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pydantic

from edgekit.config.paths import edgekit_home
from edgekit.errors import ConfigError
from edgekit.fleet.waves import to_count
from edgekit.models.events import (DeviceDone, DeviceRolledBack, DeviceStarted, Finished,
                                   Halted, Interrupted, RolloutEvent, RolloutResumed,
                                   RolloutStarted, WaveDone, WaveStarted, parse_event)
from edgekit.models.fleet import DeviceOutcome, FleetResult, RolloutPlan, WaveSummary

PLAN = "plan.json"
JOURNAL = "journal.jsonl"


def rollouts_dir() -> Path:
    return edgekit_home() / "fleet"


class Journal:
    """Appends events; safe to call from the rollout's worker threads."""

    def __init__(self, directory: Path,
                 on_event: Callable[[RolloutEvent], None] | None = None):
        self.path = directory / JOURNAL
        self._lock = threading.Lock()
        self._on_event = on_event

    def write(self, event: RolloutEvent) -> RolloutEvent:
        line = event.model_dump_json() + "\n"
        with self._lock:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        if self._on_event:
            self._on_event(event)
        return event


def save_plan(directory: Path, plan: RolloutPlan) -> None:
    tmp = directory / (PLAN + ".tmp")
    tmp.write_text(plan.model_dump_json(indent=1))
    tmp.replace(directory / PLAN)


def load_plan(directory: Path) -> RolloutPlan:
    return RolloutPlan.model_validate_json((directory / PLAN).read_text())


def read_events(directory: Path) -> list[RolloutEvent]:
    """Every event; a torn last line (a crash while writing it) is ignored, any other line
    that is not an event is an error naming it."""
    path = directory / JOURNAL
    if not path.is_file():
        return []
    lines = path.read_bytes().splitlines()
    events = []
    for number, raw in enumerate(lines, start=1):
        try:
            events.append(parse_event(raw.decode("utf-8")))
        except UnicodeDecodeError as exc:
            if number == len(lines):   # torn mid-character
                break
            raise ConfigError(f"not a rollout event: not UTF-8 at byte {exc.start}",
                              where=f"{path}:{number}", key="journal",
                              hint="the journal was changed outside edgekit; move the line "
                                   "away to resume") from None
        except pydantic.ValidationError as exc:
            if number == len(lines):
                break
            raise ConfigError(f"not a rollout event: {exc.errors()[0]['msg']}",
                              where=f"{path}:{number}", key="journal") from None
    return events


@contextmanager
def exclusive(directory: Path):
    """One process drives a rollout at a time (the lock dies with the process)."""
    with (directory / "lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"rollout {directory.name} is being driven by another edgekit "
                              "process", key="rollout",
                              hint="wait for it, or stop it and run `edgekit fleet resume`") \
                from None
        yield


@dataclass
class JournalState:
    """What the journal says happened so far."""

    started: dict[str, DeviceStarted] = field(default_factory=dict)  # first per device
    done: dict[str, DeviceDone] = field(default_factory=dict)
    rollbacks: dict[str, DeviceRolledBack] = field(default_factory=dict)
    waves_started: dict[int, float] = field(default_factory=dict)
    waves_done: dict[int, WaveDone] = field(default_factory=dict)
    halt: Halted | None = None
    finished: Finished | None = None
    interrupted: bool = False
    seconds: float = 0.0

    def previous_of(self, device: str) -> tuple[bool, str | None]:
        """(known, release that was current before this rollout touched the device)."""
        if device in self.started:
            return True, self.started[device].previous
        return False, None


def replay(events: list[RolloutEvent]) -> JournalState:
    state = JournalState()
    segment_start: float | None = None
    for e in events:
        match e:
            case RolloutStarted() | RolloutResumed():
                segment_start = e.ts
                state.interrupted = False
            case WaveStarted():
                state.waves_started.setdefault(e.wave, e.ts)
            case DeviceStarted():
                state.started.setdefault(e.device, e)
            case DeviceDone():
                state.done[e.device] = e
            case WaveDone():
                state.waves_done[e.wave] = e
            case Halted():
                state.halt = e
            case DeviceRolledBack():
                state.rollbacks[e.device] = e
            case Interrupted():
                state.interrupted = True
            case Finished():
                state.finished = e
        if isinstance(e, Interrupted | Finished) and segment_start is not None:
            state.seconds += e.ts - segment_start
            segment_start = None
    if segment_start is not None and events:
        state.seconds += events[-1].ts - segment_start
    return state


def result_of(plan: RolloutPlan, state: JournalState, directory: Path) -> FleetResult:
    wave_of = {name: i + 1 for i, names in enumerate(plan.waves) for name in names}
    outcomes = []
    for device in plan.devices:
        done = state.done.get(device.name)
        base = {"device": device.name, "address": device.address, "target": device.target,
                "wave": wave_of[device.name], "release": plan.releases[device.target]}
        if done is None:
            status = "skipped" if (state.halt or state.finished) else "pending"
            _, previous = state.previous_of(device.name)
            outcomes.append(DeviceOutcome(**base, status=status, previous=previous,
                                          reason="the rollout halted before this device"
                                          if state.halt else ""))
            continue
        fields = done.model_dump(include={"status", "reason", "failure", "previous",
                                          "p90_before_ms", "p90_after_ms", "p90_ratio",
                                          "p90_ratio_range", "p90_ratio_limit", "seconds"})
        rollback = state.rollbacks.get(device.name)
        if rollback:
            fields.update(status=rollback.status, reason=rollback.reason)
        outcomes.append(DeviceOutcome(**base, **fields))
    outcomes.sort(key=lambda o: o.wave)  # stable: inventory order within a wave
    waves = []
    for index, names in enumerate(plan.waves, start=1):
        done = state.waves_done.get(index)
        if done is None and index not in state.waves_started:
            continue
        mine = [o for o in outcomes if o.wave == index]
        waves.append(WaveSummary(
            index=index, devices=tuple(names),
            updated=sum(o.status in ("updated", "rolled-back", "rollback-failed")
                        for o in mine),
            unchanged=sum(o.status == "unchanged" for o in mine),
            failed=sum(o.status == "failed" for o in mine),
            allowed_failures=_allowed(plan, len(names)),
            halted=bool(done and done.halted), complete=done is not None,
            seconds=round((done.ts if done else state.waves_started.get(index, 0.0))
                          - state.waves_started.get(index, 0.0), 2)))
    if state.finished:
        status = state.finished.status
    elif state.interrupted:
        status = "interrupted"
    else:
        status = "running"
    return FleetResult(id=plan.id, app=plan.app, status=status,
                       halt_reason=state.halt.reason if state.halt else "",
                       rolled_back=state.halt.rollback if state.halt else "none",
                       releases=plan.releases, waves=tuple(waves), devices=tuple(outcomes),
                       seconds=round(state.seconds, 2), journal=str(directory / JOURNAL))


def _allowed(plan: RolloutPlan, wave_size: int) -> str:
    limit = plan.policy.max_fail
    if isinstance(limit, str):
        return f"{limit} of {wave_size} (≤ {int(int(limit[:-1]) * wave_size / 100)})"
    return str(to_count(limit, wave_size, minimum=0))


def find_rollout(rollout_id: str | None, *, unfinished: bool) -> Path:
    """A rollout's directory by id, or the newest one (unfinished only, for resume)."""
    root = rollouts_dir()
    candidates = sorted((p for p in root.glob("*/") if (p / PLAN).is_file()),
                        key=lambda p: (p / PLAN).stat().st_mtime) if root.is_dir() else []
    if rollout_id:
        for path in candidates:
            if path.name == rollout_id:
                return path
        raise ConfigError(f"no rollout {rollout_id!r}", key="rollout",
                          hint="known: " + (", ".join(p.name for p in candidates[-5:]) or
                                            "none"))
    if unfinished:
        candidates = [p for p in candidates if replay(read_events(p)).finished is None]
    if not candidates:
        raise ConfigError("no unfinished rollout to resume" if unfinished else "no rollouts yet",
                          key="rollout", hint="start one with `edgekit fleet update`")
    return candidates[-1]
