#!/bin/sh
# run.sh RUNTIME_DIR RELEASE_DIR OUT_DIR [SAMPLE]: run the release's golden inputs (validation
# sample SAMPLE, default 0: the golden one) through iree-run-module and write outputs as
# OUT_DIR/output_<i>.npy. The release's run.env (written by the host, covered by SHA256SUMS)
# gives MODULE (the bundle's module this device runs; older releases: module.vmfb), DRIVER,
# THREADS (local-task's worker count as tuned; absent: the runtime's default), FUNCTION, INPUTS (sample 0), INPUTS_<k> (sample k),
# FUNCTION_<k> (sample k runs that function, e.g. an LLM's decode; absent: FUNCTION), NOUTPUTS and OUTPUTS (the
# output file names: .npy, or .bin for types iree-run-module writes raw; older releases have
# no OUTPUTS: output_<i>.npy). EDGEKIT_INPUTS, when set, replaces the sample's inputs: input
# files by their paths (runs.sh's dataset samples, outside the release).
set -eu
runtime=$1
release=$2
out=$3
sample=${4:-0}
. "$release/run.env"
case $sample in
  0) ;;
  *[!0-9]*) echo "run.sh: sample must be a number (got '$sample')" >&2; exit 2 ;;
  *) eval "INPUTS=\${INPUTS_$sample:?no validation sample $sample in run.env}"
     eval "FUNCTION=\${FUNCTION_$sample:-\$FUNCTION}" ;;   # another function's sample
esac
mkdir -p "$out"
set -- "--module=$release/${MODULE:-module.vmfb}" "--device=$DRIVER" "--function=$FUNCTION"
if [ "$DRIVER" = local-task ] && [ -n "${THREADS:-}" ]; then
  set -- "$@" "--task_topology_group_count=$THREADS"
fi
if [ -n "${EDGEKIT_INPUTS:-}" ]; then
  for input in $EDGEKIT_INPUTS; do
    set -- "$@" "--input=@$input"
  done
else
  for input in $INPUTS; do
    set -- "$@" "--input=@$release/$input"
  done
fi
if [ -n "${OUTPUTS:-}" ]; then
  for output in $OUTPUTS; do
    set -- "$@" "--output=@$out/$output"
  done
else
  i=0
  while [ "$i" -lt "$NOUTPUTS" ]; do
    set -- "$@" "--output=@$out/output_$i.npy"
    i=$((i + 1))
  done
fi
exec "$runtime/bin/iree-run-module" "$@"
