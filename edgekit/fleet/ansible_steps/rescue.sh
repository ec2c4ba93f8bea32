#!/bin/sh
# rescue.sh APP_DIR SHIMS_DIR RELEASE PREVIOUS REJECTED: a step failed on this device. Journal
# `rejected` when the controller found the outputs wrong (REJECTED=yes, as `edgekit deploy`
# does), put PREVIOUS back if RELEASE went live (none before: no current release), remove the
# release unless it is current or the rollback target, and the scratch of this rollout.
set -u
cd "$HOME" || exit 1
app=$1 shims=$2 release=$3 previous=$4 rejected=$5
status=0
journal() {
  printf '{"ts": %s, "event": "%s", "release": "%s"}\n' "$(date +%s)" "$1" "$2" \
    >> "$app/journal.jsonl"
}
[ "$rejected" != yes ] || journal rejected "$release"
live() { link=$(readlink "$app/current" 2>/dev/null) || link=; echo "${link##*/}"; }
if [ "$(live)" = "$release" ] && [ "$previous" != "$release" ]; then
  if [ -n "$previous" ]; then
    if sh "$shims/verify.sh" "$app/releases/$previous" &&
        sh "$shims/activate.sh" "$app" "$previous"; then
      journal rollback "$previous"
    else
      status=1
    fi
  else
    rm -f "$app/current" && journal deactivate ""
  fi
fi
current=$(live)
target=$(sed -n 's/.*"event": "activate", "release": "\([^"]*\)".*/\1/p' \
  "$app/journal.jsonl" 2>/dev/null | grep -vxF "$current" | tail -n 1)
if [ -n "$release" ] && [ "$release" != "$current" ] && [ "$release" != "$target" ]; then
  rm -rf "$app/releases/$release"
fi
rm -rf "$app/.validation-ansible-$release.tar" .edgekit/.incoming-ansible
exit "$status"
