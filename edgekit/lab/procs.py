"""Processes the lab started, named so that a recycled pid is never taken for them: a pid
together with its start time (clock ticks after boot, field 22 of /proc/<pid>/stat)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import NamedTuple


class Proc(NamedTuple):
    pid: int
    started: int


def start_time(pid: int) -> int | None:
    """When `pid` started, or None when there is no such (living, unreaped) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()   # from field 3 (the state) on
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def identify(pid: int) -> Proc | None:
    started = start_time(pid)
    return None if started is None else Proc(pid, started)


def alive(proc: Proc) -> bool:
    return proc.pid > 0 and start_time(proc.pid) == proc.started


def send(proc: Proc, sig: int) -> bool:
    """Signal `proc` if it is still that process (a pidfd pins it while its start time is
    checked, so a pid recycled in between is never signalled). False when it is gone."""
    if proc.pid <= 0:
        return False
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        return False
    try:
        if start_time(proc.pid) != proc.started:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)
