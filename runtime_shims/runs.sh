#!/bin/sh
# runs.sh RUNTIME_DIR RELEASE_DIR OUT_DIR repeat SAMPLE R: validation sample SAMPLE run R times
# (run.sh), run r's outputs in OUT_DIR/r/ — the determinism gate compares them on the host.
# runs.sh RUNTIME_DIR RELEASE_DIR OUT_DIR dataset IN_DIR FIRST COUNT NINPUTS: dataset samples
# FIRST .. FIRST+COUNT-1, sample i's inputs IN_DIR/ds-i-j.npy (j < NINPUTS), its outputs in
# OUT_DIR/i/. One command per batch: the host pays one round trip, not one per run.
# iree-run-module has no repeat flag (IREE 3.13): each run is its own process and load.
set -eu
runtime=$1
release=$2
out=$3
mode=$4
here=$(dirname "$0")
number() {
  case $1 in ''|*[!0-9]*) echo "runs.sh: $2 must be a number (got '$1')" >&2; exit 2 ;; esac
}
case $mode in
  repeat)
    sample=$5; count=$6
    number "$sample" sample; number "$count" R
    r=0
    while [ "$r" -lt "$count" ]; do
      sh "$here/run.sh" "$runtime" "$release" "$out/$r" "$sample"
      r=$((r + 1))
    done ;;
  dataset)
    in=$5; first=$6; count=$7; ninputs=$8
    number "$first" FIRST; number "$count" COUNT; number "$ninputs" NINPUTS
    i=$first
    while [ "$i" -lt $((first + count)) ]; do
      files= ; j=0
      while [ "$j" -lt "$ninputs" ]; do
        files="$files $in/ds-$i-$j.npy"; j=$((j + 1))
      done
      EDGEKIT_INPUTS=$files sh "$here/run.sh" "$runtime" "$release" "$out/$i" 0
      i=$((i + 1))
    done ;;
  *) echo "runs.sh: mode is repeat or dataset (got '$mode')" >&2; exit 2 ;;
esac
