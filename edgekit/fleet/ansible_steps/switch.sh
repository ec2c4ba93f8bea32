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
who=edgekit
. "$shims/release_steps.sh"   # journal, live, rollback_target, hook_or_put_back
rm -f "$app/.validation-ansible-$release.tar"
journal validated "$release"
if [ "$previous" != "$release" ]; then
  sh "$shims/activate.sh" "$app" "$release" || exit 1
  if [ "$(readlink "$app/current")" != "releases/$release" ]; then
    echo "edgekit: \`current\` does not point at $release after activation" >&2
    exit 1
  fi
fi
hook_or_put_back after_activate "$release" "$previous" "$timeout" "$after_activate" || exit 1
hook_or_put_back health "$release" "$previous" "$timeout" "$health" || exit 1
# newest first, each once: the releases in the order they were last activated
history=$(sed -n 's/.*"event": "activate", "release": "\([^"]*\)".*/\1/p' "$app/journal.jsonl" |
  awk '{ line[NR] = $0 } END { for (i = NR; i > 0; i--) if (!seen[line[i]]++) print line[i] }')
current=$(live)
target=$(rollback_target)
kept=0
for name in $history; do
  case $name in ''|.|..|*[!A-Za-z0-9._-]*) continue ;; esac
  [ -d "$app/releases/$name" ] || continue
  kept=$((kept + 1))
  if [ "$kept" -gt "$keep" ] && [ "$name" != "$current" ] && [ "$name" != "$target" ]; then
    rm -rf "$app/releases/$name"
  fi
done
