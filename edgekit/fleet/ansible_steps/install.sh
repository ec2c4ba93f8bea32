#!/bin/sh
# install.sh APP_DIR SHIMS_DIR RUNTIME_PREFIX SAMPLES RELEASE ARCH: put what the copies brought
# (.edgekit/.incoming-ansible/{runtime,payload}.tar.gz) in place the way `edgekit deploy`
# does, then validate: the release is verified in staging (signature, names, sha256s), renamed
# into releases/ (an identical release already there is kept), and every validation sample
# runs from the release's own directory. The outputs (and run.sh's stderr for a sample that
# failed) are packed into one tar for the controller to fetch and compare. `current` is not
# touched here.
set -eu
cd "$HOME"
app=$1 shims=$2 runtime=$3$6/bin samples=$4 release=$5
incoming=.edgekit/.incoming-ansible
rel=$app/releases/$release
tag=ansible-$$
# A device's allowed signers are a set that a deploy adds to and never replaces (as `edgekit
# deploy` does: device/trust.py), so a device serves several controllers: the entries of $1
# whose key the device's file lacks are appended to a copy, renamed over the file.
add_signers() {
  touch .edgekit/allowed_signers
  awk -v out=".edgekit/allowed_signers.$tag" '
    function key(  i) {
      for (i = 1; i < NF; i++) if ($i ~ /^(ssh-|ecdsa-|sk-)/) return $i " " $(i + 1)
      return ""
    }
    NR == FNR { if (NF && $1 !~ /^#/) have[key()] = 1; print > out; next }
    NF && $1 !~ /^#/ && !(key() in have) { print > out }
  ' .edgekit/allowed_signers "$1"
  mv -f ".edgekit/allowed_signers.$tag" .edgekit/allowed_signers
}
if [ -f "$incoming/runtime.tar.gz" ]; then
  tmp=.edgekit/runtime/.staging-$tag
  rm -rf "$tmp"
  mkdir -p "$tmp" "$runtime"
  tar -xzf "$incoming/runtime.tar.gz" -C "$tmp"
  for tool in "$tmp"/*; do mv -f "$tool" "$runtime/"; done   # one rename per tool
  rm -rf "$tmp" "$incoming/runtime.tar.gz"
  "$runtime/iree-run-module" --help >/dev/null 2>&1 ||
    { echo "edgekit: the IREE runtime installed in $runtime does not run here" >&2; exit 1; }
fi
if [ -f "$incoming/payload.tar.gz" ]; then
  staging=$app/.staging-$tag
  rm -rf "$staging"
  mkdir -p "$staging" "$shims" "$app/releases"
  tar -xzf "$incoming/payload.tar.gz" -C "$staging"
  for shim in "$staging"/shims/*; do mv -f "$shim" "$shims/"; done
  add_signers "$staging/allowed_signers"
  sh "$shims/verify.sh" "$staging/release"
  if ! sh "$shims/verify.sh" "$rel" >/dev/null 2>&1; then
    if [ -e "$rel" ]; then     # a corrupted copy: replaced, unless it is live
      live=$(readlink "$app/current" 2>/dev/null) || live=
      if [ "${live##*/}" = "$release" ]; then
        echo "edgekit: release $release is current on this device and corrupted;" \
          "\`edgekit deploy\` repairs it in place" >&2
        exit 1
      fi
      mv -T "$rel" "$app/.trash-$tag"
    fi
    mv -T "$staging/release" "$rel"
  fi
  rm -rf "$staging" "$app/.trash-$tag" "$incoming/payload.tar.gz"
fi
rmdir "$incoming" 2>/dev/null || true
out=$app/.validation-$tag
rm -rf "$out"
mkdir -p "$out"
k=0
while [ "$k" -lt "$samples" ]; do
  if sh "$shims/run.sh" "${runtime%/bin}" "$rel" "$out/sample_$k" "$k" >/dev/null \
      2>"$out/sample_$k.err"; then
    rm -f "$out/sample_$k.err"
  fi
  k=$((k + 1))
done
tar -cf "$app/.validation-ansible-$release.tar" -C "$out" .
rm -rf "$out"
