#!/bin/sh
# activate.sh APPDIR RELEASE: make APPDIR/current point at releases/RELEASE atomically:
# a new symlink under a temporary name, then rename(2) over `current` (mv -T), then sync.
# `current` is either the old release or the new one at every instant.
set -eu
app=$1
release=$2
[ -d "$app/releases/$release" ] || { echo "no such release: $release" >&2; exit 3; }
tmp="$app/.current.$$"
ln -sfn "releases/$release" "$tmp"
mv -T "$tmp" "$app/current"
sync
printf '{"ts": %s, "event": "activate", "release": "%s"}\n' "$(date +%s)" "$release" \
  >> "$app/journal.jsonl"
