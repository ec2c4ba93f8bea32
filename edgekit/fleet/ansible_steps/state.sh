#!/bin/sh
# state.sh APP_DIR SHIMS_DIR RUNTIME_PREFIX SHIM_SUMS SIGNERS_SUM RUNTIME_SUMS RELEASE: the
# exported playbook's first step on a device (Ansible `raw`: one SSH session, no Python). What
# is already there decides what the next steps send: the runtime tools for this arch (lines
# "<arch> <sha256>  <tool>" in RUNTIME_SUMS), and the release with the shims and trusted
# signers it needs. Prints one JSON line: {"home" (where the copies and the fetch go: the
# same $HOME every step runs in), "arch", "previous" (the release `current` points at),
# "runtime" (the tools are there), "payload" (nothing to send)}.
set -u
cd "$HOME" || exit 1
app=$1 shims=$2 runtime_prefix=$3 shim_sums=$4 signers_sum=$5 runtime_sums=$6 release=$7
case $HOME in
  /*[!A-Za-z0-9._/+@-]*|[!/]*|'') echo "edgekit: unusual home '$HOME'" >&2; exit 3 ;;
esac
arch=$(uname -m)
case $arch in
  ''|*[!A-Za-z0-9_]*) echo "edgekit: unexpected machine name '$arch'" >&2; exit 3 ;;
esac
sums=$(printf '%s\n' "$runtime_sums" | sed -n "s/^$arch //p")
[ -n "$sums" ] || { echo "edgekit: this export has no IREE runtime for $arch" >&2; exit 3; }
previous=$(readlink "$app/current" 2>/dev/null) || previous=
previous=${previous##*/}
case $previous in *[!A-Za-z0-9._-]*) previous= ;; esac
mkdir -p .edgekit/.incoming-ansible || exit 1
runtime=false
if (cd "$runtime_prefix$arch/bin" 2>/dev/null &&
    printf '%s\n' "$sums" | sha256sum -c --status --strict 2>/dev/null); then
  runtime=true
fi
payload=false
if (cd "$shims" 2>/dev/null && printf '%s\n' "$shim_sums" | sha256sum -c --status --strict \
      2>/dev/null) &&
    printf '%s  .edgekit/allowed_signers\n' "$signers_sum" | sha256sum -c --status 2>/dev/null &&
    sh "$shims/verify.sh" "$app/releases/$release" >/dev/null 2>&1; then
  payload=true
fi
printf '{"home": "%s", "arch": "%s", "previous": "%s", "runtime": %s, "payload": %s}\n' \
  "$HOME" "$arch" "$previous" "$runtime" "$payload"
