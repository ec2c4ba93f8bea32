#!/bin/sh
# verify.sh DIR: check every file listed in DIR/SHA256SUMS. Exit 0 only if all match;
# otherwise print the files that differ and exit 1.
set -eu
cd "$1"
if out=$(sha256sum -c --quiet --strict SHA256SUMS 2>&1); then
  exit 0
fi
printf '%s\n' "$out" >&2
exit 1
