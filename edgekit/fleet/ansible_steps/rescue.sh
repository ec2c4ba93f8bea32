#!/bin/sh
# rescue.sh APP_DIR SHIMS_DIR RELEASE PREVIOUS REJECTED: a step failed on this device. Journal
# `rejected` when the controller found the outputs wrong (REJECTED=yes, as `edgekit deploy`
# does), put PREVIOUS back if RELEASE went live (none before: no current release), remove the
# release unless it is current or the rollback target, and the scratch of this rollout.
set -u
cd "$HOME" || exit 1
app=$1 shims=$2 release=$3 previous=$4 rejected=$5
status=0
who=edgekit
if [ -f "$shims/release_steps.sh" ]; then   # absent: nothing of this rollout was installed
  . "$shims/release_steps.sh"   # journal, live, rollback_target, put_back
  [ "$rejected" != yes ] || journal rejected "$release"
  if [ "$(live)" = "$release" ]; then
    put_back "$release" "$previous" || status=1
  fi
  current=$(live)
  target=$(rollback_target)
  if [ -n "$release" ] && [ "$release" != "$current" ] && [ "$release" != "$target" ]; then
    rm -rf "$app/releases/$release"
  fi
fi
rm -rf "$app/.validation-ansible-$release.tar" .edgekit/.incoming-ansible
exit "$status"
