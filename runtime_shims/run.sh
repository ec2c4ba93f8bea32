#!/bin/sh
# run.sh RUNTIME_DIR RELEASE_DIR OUT_DIR: run the release's golden inputs through
# iree-run-module and write outputs as OUT_DIR/output_<i>.npy (.bin: raw bytes, for dtypes .npy
# cannot carry). The release's run.env (written by the host, covered by SHA256SUMS) gives
# DRIVER, FUNCTION, INPUTS and OUTPUTS (file names; older releases: NOUTPUTS, all .npy).
set -eu
runtime=$1
release=$2
out=$3
. "$release/run.env"
mkdir -p "$out"
set -- "--module=$release/module.vmfb" "--device=$DRIVER" "--function=$FUNCTION"
for input in $INPUTS; do
  set -- "$@" "--input=@$release/$input"
done
if [ -n "${OUTPUTS+set}" ]; then
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
