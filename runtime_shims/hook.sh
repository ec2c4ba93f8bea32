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
# kill -0 succeeds until the leader is reaped (the shell reaps it while waiting for `sleep`)
while kill -0 "$pid" 2>/dev/null; do
  if [ "$elapsed" -ge "$ticks" ]; then
    kill -TERM "-$pid" 2>/dev/null
    grace=0
    while kill -0 "-$pid" 2>/dev/null && [ "$grace" -lt 20 ]; do
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
