"""Processes the lab started, named so that a recycled pid is never taken for them: a pid
together with its start time (psutil's `create_time`), and the process trees below them."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import NamedTuple

import psutil


class Proc(NamedTuple):
    pid: int
    started: float          # psutil's create_time(): seconds since the epoch


def start_time(pid: int) -> float | None:
    """When `pid` started, or None when there is no such (living, unreaped) process."""
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return process.create_time()
    except (psutil.Error, ValueError):
        return None


def identify(pid: int) -> Proc | None:
    started = start_time(pid)
    return None if started is None else Proc(pid, started)


def tree(proc: Proc) -> list[Proc]:
    """Every process below `proc` (its children, theirs, ...), none when `proc` is gone."""
    if not alive(proc):
        return []
    try:
        below = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in below:
        try:
            found.append(Proc(child.pid, child.create_time()))
        except psutil.Error:
            continue            # ended meanwhile
    return found


def command_line(proc: Proc) -> str | None:
    """`proc`'s command line as one string (None when it is gone or is another process)."""
    try:
        process = psutil.Process(proc.pid)
        if process.create_time() != proc.started:
            return None
        return " ".join(process.cmdline())
    except psutil.Error:
        return None


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
