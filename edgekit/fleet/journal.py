"""The rollout's local journal: an append-only JSON-lines file, one event per step per device,
flushed and fsync'd as it is written, so a crash loses at most the step in flight. Replaying
it gives the rollout's state (what a resume continues from) and its result (what the report
shows), in one place.

Rollouts live in $EDGEKIT_HOME/fleet/<id>/: plan.json, journal.jsonl, bundles/<target>/.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pydantic
from filelock import FileLock, Timeout

from edgekit.config.paths import edgekit_home
from edgekit.errors import ConfigError
from edgekit.fleet.waves import to_count
from edgekit.models.dataset import read_score
from edgekit.models.events import (DeviceDone, DeviceRolledBack, DeviceStarted, DeviceStep,
                                   Finished, Halted, Interrupted, JournalRepaired,
                                   RolloutEvent, RolloutResumed, RolloutStarted, WaveDone,
                                   WaveStarted, parse_event)
from edgekit.models.fleet import DeviceOutcome, FleetResult, RolloutPlan, WaveSummary

PLAN = "plan.json"
JOURNAL = "journal.jsonl"
# the deploy steps after which a device's `current` may have moved: a halt's rollback reads
# them back (JournalState.switched), so they are on disk before the step begins; the other
# steps are progress
SWITCHING_STEPS = ("activate", "hooks")


def rollouts_dir() -> Path:
    return edgekit_home() / "fleet"


class Journal:
    """Appends events and keeps the state they replay to; safe to call from the rollout's
    worker threads. Open it with `with`.

    Group commit: each event is written (in order) and then made durable by one fsync that
    covers every line written before it, so devices finishing together share an fsync instead
    of queueing for one each; `write` returns only once its own event is on disk (no
    acknowledged event is ever lost). The state is updated as events are written, so the
    rollout never re-reads its journal.

    A last line torn by a crash mid-write is repaired on open: set aside in a file beside the
    journal (`journal.torn-<time>.jsonl`), said once by a `JournalRepaired` event, and never
    appended after (a line after a torn one made the whole journal unreadable)."""

    def __init__(self, directory: Path,
                 on_event: Callable[[RolloutEvent], None] | None = None):
        self.path = directory / JOURNAL
        self._on_event = on_event
        self._lock = threading.Lock()          # order of lines and state
        self._sync_lock = threading.Lock()     # one fsync at a time
        self._written = self._synced = 0
        events, torn = _read_repairing(self.path)
        self.state = replay(events)
        self._file = self.path.open("a", encoding="utf-8")
        if torn is not None:
            self.write(JournalRepaired(set_aside=torn[0].name, bytes=torn[1]))

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def write(self, event: RolloutEvent, durable: bool = True) -> RolloutEvent:
        """Append `event`; return once it is on disk. `durable=False` (a progress step no
        decision reads back) returns once it is written: the next durable event's fsync
        covers it, and a crash may lose it, never an event after it."""
        line = event.model_dump_json() + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()                 # in the OS, in order; durable below
            self._written += 1
            mine = self._written
            self.state.apply(event)
        if durable:
            with self._sync_lock:
                if self._synced < mine:
                    covered = self._written    # every line flushed so far
                    os.fsync(self._file.fileno())
                    self._synced = covered
        if self._on_event:
            self._on_event(event)
        return event


def _read_repairing(path: Path) -> tuple[list[RolloutEvent], tuple[Path, int] | None]:
    """The journal's events; a torn last line is moved to a file beside it and cut off."""
    if not path.is_file():
        return [], None
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    events = _parse_lines(path, data[:cut].splitlines(), torn_last_ok=False)
    if not tail:
        return events, None
    aside = path.with_name(f"journal.torn-{time.time_ns()}.jsonl")
    aside.write_bytes(tail)
    with path.open("r+b") as f:
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    return events, (aside, len(tail))


def _parse_lines(path: Path, lines: list[bytes], torn_last_ok: bool) -> list[RolloutEvent]:
    """Each line's event; a line that is not one (not UTF-8, not an event) is an error naming
    it, unless it is the last and `torn_last_ok` (a crash while writing it)."""
    events = []
    for number, raw in enumerate(lines, start=1):
        try:
            events.append(parse_event(raw.decode("utf-8")))
        except UnicodeDecodeError as exc:
            if torn_last_ok and number == len(lines):   # torn mid-character
                break
            raise ConfigError(f"not a rollout event: not UTF-8 at byte {exc.start}",
                              where=f"{path}:{number}", key="journal",
                              hint="the journal was changed outside edgekit; move the line "
                                   "away to resume") from None
        except pydantic.ValidationError as exc:
            if torn_last_ok and number == len(lines):
                break
            raise ConfigError(f"not a rollout event: {exc.errors()[0]['msg']}",
                              where=f"{path}:{number}", key="journal") from None
    return events


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
    return _parse_lines(path, path.read_bytes().splitlines(), torn_last_ok=True)


@contextmanager
def exclusive(directory: Path):
    """One process drives a rollout at a time (the lock dies with the process)."""
    lock = FileLock(directory / "lock", blocking=False, fallback_to_soft=False)
    try:
        lock.acquire()
    except Timeout:
        raise ConfigError(f"rollout {directory.name} is being driven by another edgekit "
                          "process", key="rollout",
                          hint="wait for it, or stop it and run `edgekit fleet resume`") \
            from None
    try:
        yield
    finally:
        lock.release()


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
    # devices whose `current` was switched (activation or hooks reached): a failed one may
    # need its restore checked after a halt
    switched: set[str] = field(default_factory=set)
    _segment_start: float | None = None
    _last_ts: float | None = None

    def apply(self, e: RolloutEvent) -> None:
        """Fold one more event into the state (the journal's order)."""
        match e:
            case RolloutStarted() | RolloutResumed():
                self._close_segment(self._last_ts)
                self._segment_start = e.ts
                self.interrupted = False
            case WaveStarted():
                self.waves_started.setdefault(e.wave, e.ts)
            case DeviceStarted():
                self.started.setdefault(e.device, e)
            case DeviceStep() if e.step in SWITCHING_STEPS:
                self.switched.add(e.device)
            case DeviceDone():
                self.done[e.device] = e
            case WaveDone():
                self.waves_done[e.wave] = e
            case Halted():
                self.halt = e
            case DeviceRolledBack():
                self.rollbacks[e.device] = e
            case Interrupted():
                self.interrupted = True
            case Finished():
                self.finished = e
        self._last_ts = e.ts
        if isinstance(e, Interrupted | Finished):
            self._close_segment(e.ts)

    def _close_segment(self, end: float | None) -> None:
        if self._segment_start is not None and end is not None:
            self.seconds += end - self._segment_start
        self._segment_start = None

    def running_seconds(self) -> float:
        """Time spent driving the rollout, the segment in progress included."""
        if self._segment_start is not None and self._last_ts is not None:
            return self.seconds + self._last_ts - self._segment_start
        return self.seconds

    def previous_of(self, device: str) -> tuple[bool, str | None]:
        """(known, release that was current before this rollout touched the device)."""
        if device in self.started:
            return True, self.started[device].previous
        return False, None


def replay(events: list[RolloutEvent]) -> JournalState:
    state = JournalState()
    for e in events:
        state.apply(e)
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
        # checked as every score edgekit shows is (a journal is a file anyone may edit)
        fields["dataset"] = read_score(done.dataset)
        rollback = state.rollbacks.get(device.name)
        if rollback:
            fields.update(status=rollback.status, reason=rollback.reason)
        outcomes.append(DeviceOutcome(**base, **fields))
    outcomes.sort(key=lambda o: o.wave)  # stable: inventory order within a wave
    by_wave: dict[int, list[DeviceOutcome]] = {}
    for outcome in outcomes:
        by_wave.setdefault(outcome.wave, []).append(outcome)
    waves = []
    for index, names in enumerate(plan.waves, start=1):
        done = state.waves_done.get(index)
        if done is None and index not in state.waves_started:
            continue
        mine = by_wave.get(index, [])
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
                       seconds=round(state.running_seconds(), 2),
                       journal=str(directory / JOURNAL))


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
