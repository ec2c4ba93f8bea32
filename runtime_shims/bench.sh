#!/bin/sh
# bench.sh RUNTIME_DIR RELEASE_DIR [EXTRA_FLAG...]: iree-benchmark-module on the release's
# golden inputs, JSON on stdout. Extra flags (e.g. --benchmark_repetitions=10) pass through.
set -eu
runtime=$1
release=$2
shift 2
. "$release/run.env"
inputs=""
for input in $INPUTS; do
  inputs="$inputs --input=@$release/$input"
done
# shellcheck disable=SC2086 # $inputs holds one flag per validated relative path
exec "$runtime/bin/iree-benchmark-module" "--module=$release/module.vmfb" "--device=$DRIVER" \
  "--function=$FUNCTION" $inputs --benchmark_format=json "$@"
