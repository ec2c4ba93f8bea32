#!/bin/sh
# verify.sh DIR [--allow-unsigned | --expect-sums HEX[,HEX…]]: is DIR (a release, or an app's
# `current` link to one) a whole, signed release? Exit 0 only if
#  1. it holds plain files with a release's names only (manifest.json, manifest.json.sig,
#     SHA256SUMS, run.env, module.vmfb, golden/<name>.npy, variants/<name>.vmfb,
#     npu/<name>.tosa|tflite|csv|rknn|json, dispatch-configs/<name>.mlir): no symlink, no
#     other path;
#  2. manifest.json's signature verifies (ssh-keygen -Y verify, namespace edgekit-bundle)
#     against /etc/edgekit/allowed_signers if present, else ~/.edgekit/allowed_signers
#     (skipped with --allow-unsigned: the user's explicit opt-out; with --expect-sums,
#     SHA256SUMS must instead be one of the files the controller writes for this release —
#     its sha256 one of HEX — after checking the manifest's signature itself: SHA256SUMS then
#     pins the signed manifest and every file, and 3 checks them. A fleet's live-release
#     check spares each device the signature's two ssh-keygen runs and the manifest parsing,
#     most of this program's time);
#  3. the sha256 of each file the signed manifest lists is the one in SHA256SUMS, and every
#     file in DIR is listed there and matches (sha256sum -c).
# Otherwise print one line saying why (the files that differ, for 3) and exit 1.
set -eu
export LC_ALL=C
dir=$1
allow_unsigned=${2:-}
expected_sums=
case $allow_unsigned in
  ''|--allow-unsigned) ;;
  --expect-sums)
    expected_sums=${3:-}
    allow_unsigned=
    case ,$expected_sums, in
      *[!0-9a-f,]*|,,|*,,*) echo "verify: --expect-sums needs sha256s" >&2; exit 2 ;;
    esac ;;
  *) echo "verify: unknown option $allow_unsigned" >&2; exit 2 ;;
esac
signers=/etc/edgekit/allowed_signers
[ -f "$signers" ] || signers=${HOME:-.}/.edgekit/allowed_signers
case $signers in /*) ;; *) signers=$PWD/$signers ;; esac

fail() { echo "verify: $dir: $*" >&2; exit 1; }

if [ -L "$dir" ]; then  # only an app's `current` link, to releases/<id>, is followed
  link=$(readlink "$dir")
  case $link in
    releases/*/*|releases/.*) fail "the release directory is a symlink to $link" ;;
    releases/?*) dir=$(dirname "$dir")/$link ;;
    *) fail "the release directory is a symlink to $link" ;;
  esac
  if [ -L "$dir" ]; then fail "the release directory is a symlink"; fi
fi
[ -d "$dir" ] || fail "no such release directory"
cd "$dir"

# 1. containment: a closed set of names, plain files and one plain golden/ directory
# kind_of NAME sets $kind: the kind a release's entry must be (f: file, d: directory), or x.
# No subshell or program per entry: a fleet verifies every device's live release, and on a
# small board each fork counts.
kind_of() {
  case $1 in
    manifest.json|manifest.json.sig|SHA256SUMS|run.env|module.vmfb) kind=f ;;
    golden|variants|npu|dispatch-configs) kind=d ;;
    golden/*.npy) plain_file "${1#golden/}" ;;
    variants/*.vmfb) plain_file "${1#variants/}" ;;
    npu/*.tosa|npu/*.tflite|npu/*.csv|npu/*.rknn|npu/*.json) plain_file "${1#npu/}" ;;
    dispatch-configs/*.mlir) plain_file "${1#dispatch-configs/}" ;;
    *) kind=x ;;
  esac
}
plain_file() {
  case $1 in
    .*|*[!A-Za-z0-9._-]*|*..*) kind=x ;;
    *) kind=f ;;
  esac
}
[ -f SHA256SUMS ] && [ ! -L SHA256SUMS ] || fail "no SHA256SUMS"
sums_names=$(cut -c67- SHA256SUMS)
set -f
IFS='
'
for name in $sums_names; do
  kind_of "$name"
  [ "$kind" = f ] && [ "$name" != SHA256SUMS ] || \
    fail "SHA256SUMS lists an unexpected file name: $name"
done
listed="
$sums_names
"
for path in $(find . -mindepth 1); do
  name=${path#./}
  kind_of "$name"
  [ "$kind" != x ] || fail "unexpected file name: $name"
  if [ -L "$name" ]; then fail "$name is a symlink"; fi
  if [ "$kind" = f ] && [ ! -f "$name" ]; then fail "$name is not a plain file"; fi
  if [ "$kind" = d ] && [ ! -d "$name" ]; then fail "$name is not a directory"; fi
  if [ "$kind" = f ] && [ "$name" != SHA256SUMS ]; then
    case $listed in
      *"
$name
"*) ;;
      *) fail "$name is not listed in SHA256SUMS" ;;
    esac
  fi
done
unset IFS
set +f

# 2. the signature over manifest.json
if [ -n "$expected_sums" ]; then
  sums=$(sha256sum < SHA256SUMS | cut -c1-64)
  case ,$expected_sums, in
    *,"$sums",*) ;;
    *) fail "SHA256SUMS is not one the controller wrote for this release" ;;
  esac
  [ -f manifest.json.sig ] || fail "the release is not signed (no manifest.json.sig)"
  allow_unsigned=pinned      # 2 is the controller's: skip it, 3 checks every file
fi
if [ -z "$allow_unsigned" ]; then
  [ -f manifest.json.sig ] || fail "the release is not signed (no manifest.json.sig)"
  [ -f "$signers" ] || fail "no trusted signers on this device ($signers)"
  command -v ssh-keygen >/dev/null 2>&1 || \
    fail "ssh-keygen not found: cannot check the signature (install openssh-client)"
  principal=$(ssh-keygen -Y find-principals -s manifest.json.sig -f "$signers" 2>/dev/null \
              | head -n 1) || true
  principal=${principal%%,*}
  [ -n "$principal" ] || fail "signed by a key that is not in $signers"
  ssh-keygen -Y verify -f "$signers" -I "$principal" -n edgekit-bundle -s manifest.json.sig \
      < manifest.json >/dev/null 2>&1 || \
    fail "manifest.json does not match its signature by $principal"
  # the signed manifest's files and their sha256s are exactly SHA256SUMS's payload lines
  signed=$(grep -o '"[^"]*" *: *"[0-9a-f]\{64\}"' manifest.json \
           | sed 's/^"\([^"]*\)" *: *"\([0-9a-f]*\)"$/\2  \1/' \
           | grep -E '^[0-9a-f]{64}  (module\.vmfb|golden/[A-Za-z0-9._-]+\.npy|variants/[A-Za-z0-9._-]+\.vmfb|npu/[A-Za-z0-9._-]+\.(tosa|tflite|csv|rknn|json)|dispatch-configs/[A-Za-z0-9._-]+\.mlir)$' \
           | sort) || true
  summed=$(grep -vE '  (manifest\.json|manifest\.json\.sig|run\.env)$' SHA256SUMS | sort) \
    || true
  [ -n "$signed" ] || fail "manifest.json lists no files"
  [ "$signed" = "$summed" ] || fail "SHA256SUMS does not match the signed manifest's files"
  grep -q "  manifest.json\$" SHA256SUMS || fail "manifest.json is not listed in SHA256SUMS"
fi

# 3. every file's sha256
if out=$(sha256sum -c --quiet --strict SHA256SUMS 2>&1); then
  exit 0
fi
fail "sha256 mismatch: $(printf '%s\n' "$out" | tr '\n' ' ' | sed 's/ $//')"
