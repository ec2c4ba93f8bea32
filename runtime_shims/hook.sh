#!/bin/sh
# hook.sh TIMEOUT_S COMMAND: run the user's hook COMMAND (sh -c) in a session and process group
# of its own; past TIMEOUT_S seconds, kill that whole group (TERM, then KILL after 2 s) and exit
# 124 with "edgekit-hook-timeout" on stderr. The deadline is kept here, on the device, so the
# hook's processes die even if edgekit or its connection is gone. A hook that exits in time
# keeps what it started in the background (a restarted service), as before.
set -u
timeout=$1
command=$2
command -v setsid >/dev/null 2>&1 || { echo "hook.sh: setsid not found on the device" >&2; exit 127; }
# A background job of a non-interactive shell is not a group leader, so setsid does not fork:
# $! is the new session's leader and its process group id.
setsid sh -c "$command" </dev/null &
pid=$!
ticks=$(awk -v t="$timeout" 'BEGIN { printf "%d", t * 10 + 0.999 }')
elapsed=0
# running PGID: a member of the group is still running. Not a zombie: where PID 1 reaps late (a
# container's init; this repository's CI machine) the killed group's zombies kept
# `kill -0 -PGID` succeeding, and every timed-out hook waited out the whole 2 s grace.
running() {
  group=$1
  kill -0 "-$group" 2>/dev/null || return 1
  [ -r /proc/self/stat ] || return 0
  for stat in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$stat" || continue
    # shellcheck disable=SC2086 # the fields after "(comm) ": state, ppid, pgrp, ...
    set -- ${line##*) }
    [ "${3:-}" = "$group" ] && [ "$1" != Z ] && return 0
  done
  return 1
}
# kill -0 succeeds until the leader is reaped (the shell reaps it while waiting for `sleep`)
while kill -0 "$pid" 2>/dev/null; do
  if [ "$elapsed" -ge "$ticks" ]; then
    kill -TERM "-$pid" 2>/dev/null
    grace=0
    while running "$pid" && [ "$grace" -lt 20 ]; do
      sleep 0.1
      grace=$((grace + 1))
    done
    kill -KILL "-$pid" 2>/dev/null
    echo "edgekit-hook-timeout: the hook ran past ${timeout} s; its process group was killed" >&2
    exit 124
  fi
  sleep 0.1
  elapsed=$((elapsed + 1))
done
status=0
wait "$pid" || status=$?
exit "$status"
