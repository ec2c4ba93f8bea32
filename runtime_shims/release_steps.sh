# release_steps.sh: the steps every on-device path that switches a release shares, sourced
# (`. "$shims/release_steps.sh"`) by install_bundle.sh (the pull agent, the Mender module) and by
# the Ansible export's switch.sh and rescue.sh, so the journal's records, the rollback target
# and what a failed hook leaves behind are written once. A pushed deploy does the same steps
# from the host (device/deploy.py, device/releases.py). The caller sets $app (the app's
# folder), $shims (this folder) and $who (the prefix of its messages).

journal() {  # journal EVENT RELEASE: one line of the app's journal, as a pushed deploy writes it
  printf '{"ts": %s, "event": "%s", "release": "%s"}\n' "$(date +%s)" "$1" "$2" \
    >> "$app/journal.jsonl"
}

live() { link=$(readlink "$app/current" 2>/dev/null) || link=; echo "${link##*/}"; }

rollback_target() {  # the newest activated release that is not current
  sed -n 's/.*"event": "activate", "release": "\([^"]*\)".*/\1/p' "$app/journal.jsonl" \
    2>/dev/null | grep -vxF "$(live)" | tail -n 1 || true
}

# put_back RELEASE PREVIOUS: RELEASE failed after it went live; `current` goes back to
# PREVIOUS (none: the app has no current release again). Sets $back to what happened, for the
# caller's message; returns 1 when PREVIOUS could not be put back.
put_back() {
  if [ -n "$2" ] && [ "$2" != "$1" ]; then
    if sh "$shims/verify.sh" "$app/releases/$2" >/dev/null &&
        sh "$shims/activate.sh" "$app" "$2"; then
      journal rollback "$2"
      back="\`current\` is back on $2"
    else
      back="putting $2 back failed: \`current\` points at $(live)"
      return 1
    fi
  elif [ -z "$2" ]; then
    rm -f "$app/current" && journal deactivate ""
    back="the app has no current release again"
  else
    back="$1 stays current (it was before)"
  fi
}

# hook_or_put_back NAME RELEASE PREVIOUS TIMEOUT_S COMMAND: run RELEASE's hook NAME (an empty
# COMMAND: none). A failing hook is journaled (NAME-failed), PREVIOUS is put back, one line on
# stderr says what happened, and the function returns 1.
hook_or_put_back() {
  [ -n "$5" ] || return 0
  EDGEKIT_APP=${app##*/} EDGEKIT_RELEASE=$2 EDGEKIT_RELEASE_DIR=$app/releases/$2 \
    sh "$shims/hook.sh" "$4" "$5" </dev/null && return 0
  code=$?
  journal "$1-failed" "$2"
  put_back "$2" "$3" || true
  echo "$who: the $1 hook exited with $code; $back" >&2
  return 1
}
