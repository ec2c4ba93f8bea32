#!/bin/sh
# switch.sh APP_DIR SHIMS_DIR HOOK_TIMEOUT_S KEEP AFTER_ACTIVATE HEALTH RELEASE PREVIOUS: after
# the controller found the outputs equal to the golden ones: journal `validated` (what
# `edgekit fleet status` shows), switch `current` (the activate shim, unless RELEASE already is
# current), run the hooks (the hook shim; empty: none), then prune as `edgekit deploy` does:
# `current`, the rollback target and the newest KEEP activated releases stay. The hook commands come as
# `printf %b` octal escapes (\0NNN per byte): the playbook never holds the user's text, so
# neither Ansible's templating nor the quoting can change it. A failing hook is journaled
# (`<hook>-failed`) and `current` goes back to PREVIOUS (`rollback`; none: `deactivate`), as
# `edgekit deploy` does; then exit 1.
set -u
cd "$HOME" || exit 1
app=$1 shims=$2 timeout=$3 keep=$4 release=$7 previous=$8
after_activate=$(printf '%b' "$5")
health=$(printf '%b' "$6")
journal() {
  printf '{"ts": %s, "event": "%s", "release": "%s"}\n' "$(date +%s)" "$1" "$2" \
    >> "$app/journal.jsonl"
}
rm -f "$app/.validation-ansible-$release.tar"
journal validated "$release"
if [ "$previous" != "$release" ]; then
  sh "$shims/activate.sh" "$app" "$release" || exit 1
  if [ "$(readlink "$app/current")" != "releases/$release" ]; then
    echo "edgekit: \`current\` does not point at $release after activation" >&2
    exit 1
  fi
fi
hook() {   # hook NAME COMMAND
  [ -n "$2" ] || return 0
  EDGEKIT_APP=${app##*/} EDGEKIT_RELEASE=$release EDGEKIT_RELEASE_DIR=$app/releases/$release \
    sh "$shims/hook.sh" "$timeout" "$2" </dev/null && return 0
  code=$?
  journal "$1-failed" "$release"
  if [ -n "$previous" ] && [ "$previous" != "$release" ]; then
    sh "$shims/verify.sh" "$app/releases/$previous" &&
      sh "$shims/activate.sh" "$app" "$previous" && journal rollback "$previous"
    back="\`current\` is back on $previous"
  elif [ -z "$previous" ]; then
    rm -f "$app/current" && journal deactivate ""
    back="the app has no current release again"
  else
    back="$release stays current (it was before)"
  fi
  echo "edgekit: the $1 hook exited with $code; $back" >&2
  exit 1
}
hook after_activate "$after_activate"
hook health "$health"
# newest first, each once: the releases in the order they were last activated
history=$(sed -n 's/.*"event": "activate", "release": "\([^"]*\)".*/\1/p' "$app/journal.jsonl" |
  awk '{ line[NR] = $0 } END { for (i = NR; i > 0; i--) if (!seen[line[i]]++) print line[i] }')
live=$(readlink "$app/current" 2>/dev/null) || live=
live=${live##*/}
target=$(printf '%s\n' "$history" | grep -vxF "$live" | head -n 1) || target=
kept=0
for name in $history; do
  case $name in ''|.|..|*[!A-Za-z0-9._-]*) continue ;; esac
  [ -d "$app/releases/$name" ] || continue
  kept=$((kept + 1))
  if [ "$kept" -gt "$keep" ] && [ "$name" != "$live" ] && [ "$name" != "$target" ]; then
    rm -rf "$app/releases/$name"
  fi
done
