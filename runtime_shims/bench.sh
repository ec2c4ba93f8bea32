#!/bin/sh
# bench.sh RUNTIME_DIR RELEASE_DIR [EXTRA_FLAG...]: iree-benchmark-module on the release's
# golden inputs, its JSON on stdout. Extra flags (e.g. --benchmark_repetitions=10) pass through.
# EDGEKIT_DRIVER, when set, replaces the release's runtime driver (the tuner's local-sync trial).
# The release's THREADS (local-task's tuned worker count) applies unless EDGEKIT_DRIVER is set;
# an extra --task_topology_group_count comes later and wins (IREE parses flags in order).
# The last stderr line is "edgekit-peak-rss-kb=N": the benchmark process's peak resident memory
# (VmHWM, sampled every 10 ms: a run shorter than that can under-report).
set -eu
runtime=$1
release=$2
shift 2
. "$release/run.env"
inputs=""
if [ -z "${EDGEKIT_DRIVER:-}" ] && [ "$DRIVER" = local-task ] && [ -n "${THREADS:-}" ]; then
  inputs=" --task_topology_group_count=$THREADS"
fi
for input in $INPUTS; do
  inputs="$inputs --input=@$release/$input"
done
# shellcheck disable=SC2086 # $inputs holds one flag per validated relative path
"$runtime/bin/iree-benchmark-module" "--module=$release/${MODULE:-module.vmfb}" "--device=${EDGEKIT_DRIVER:-$DRIVER}" \
  "--function=$FUNCTION" $inputs --benchmark_format=json "$@" &
pid=$!
peak=0
while kill -0 "$pid" 2>/dev/null; do
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$hwm" ] && peak=$hwm
  sleep 0.01
done
status=0
wait "$pid" || status=$?
echo "edgekit-peak-rss-kb=$peak" >&2
exit "$status"
