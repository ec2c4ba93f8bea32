"""Runs one lab device's sshd (the arguments after this script) as a child subreaper, so that
every process the device starts stays below this one — a session's detached background job is
re-parented here, not to init. SIGTERM ends the whole tree (SIGKILL, until no child is left)
and then this process; it also ends by itself when the tree is empty.

`lab down` therefore kills exactly what the device started, never "every process of uid N":
the device user's uid may belong to someone else on this machine (an aarch64 device's user
lives in the rootfs's passwd, not the host's).

Started as `python3 -I reaper.py ARGV...` by `edgekit.lab.devices`: the standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


class _Stop(Exception):
    pass


def _on_term(signum, frame):
    raise _Stop


def descendants(root: int) -> list[int]:
    """Every process below `root` in the process tree (children first); `lab down` uses it
    too (this file stays standard-library only: it runs as `python3 -I -S`)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_tree() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
        _reap()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: reaper.py PROGRAM [ARG...]", file=sys.stderr)
        return 2
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}",
              file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    try:
        while True:
            os.wait()
    except ChildProcessError:
        return 0        # sshd and everything it started have ended
    except _Stop:
        _end_tree()
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
