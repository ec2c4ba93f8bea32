#!/bin/sh
# install_bundle.sh: a pushed deploy's on-device state machine, without Python and without a
# controller in the loop (the pull agent, agent.sh, and the Mender update module run it).
#
#   install_bundle.sh stage-validate ROOT APP DIR   stage DIR as a release of APP, validate it
#                                                   here; prints the release id (stdout, last
#                                                   line); `current` is not touched
#   install_bundle.sh activate ROOT APP RELEASE     switch `current` atomically, run the hooks;
#                                                   a failing hook puts the previous release back
#   install_bundle.sh rollback ROOT APP             `current` back to the release before it
#
# ROOT is edgekit's device root (normally $HOME/.edgekit: apps/, runtime/, shims/ as
# device/layout.py has them); the sibling shims of this file (verify, run, activate, hook) are
# used. DIR is a device payload (edgekit/channel/payload.py writes it; already sha256-checked
# by whoever downloaded it): the release's files exactly as `edgekit deploy` stages them
# (manifest.json, manifest.json.sig, SHA256SUMS, run.env, module.vmfb, golden/...) plus
# edgekit-plan and edgekit-plan.sig. The plan is what the host resolved from the manifest so
# that no JSON is parsed here: the release id, the runtime version, the hooks, and per output
# and validation sample the golden file and the limits (atol, rtol, min_cosine, exact, top-1)
# that `edgekit deploy` compares with (validate/compare.py). Both signatures (the manifest's
# and the plan's, namespace edgekit-bundle) must verify against the device's allowed signers.
#
# Validation runs every sample through run.sh and compares each output with its golden one
# here: values are decoded from their IEEE bits (od -t u4/u2, exact to the last bit), and the
# rules are compare.py's (shape and dtype, NaN/Inf places, |a-e| <= atol + rtol*|e|, cosine
# where it means something, arg-max agreement per row). Golden outputs that prove nothing
# (all NaN/Inf, all zero, constant within tolerance on every sample, or the same for every
# sample) are refused as the host refuses them (validate/golden.py) unless the plan accepts
# them. iree-run-module's own --expected_output (3.13: --expected_<type>_threshold, one
# absolute tolerance per element type, --expected_rtol, one for every float type, NaN equal
# to NaN) cannot hold these rules (limits per output, min_cosine, arg-max, Inf places), so
# it is not used.
#
# Journal (APP/journal.jsonl), the same records as a pushed deploy: validated | rejected,
# activate (activate.sh), after_activate-failed | health-failed, rollback | deactivate.
# Exit codes: 0 done; 1 refused or failed (one line on stderr says why; `current` is as it
# was); 2 usage; 3 validation failed (the release was rejected and removed).
set -eu
export LC_ALL=C
here=$(cd "$(dirname "$0")" && pwd)
shims=$here who=install_bundle
. "$here/release_steps.sh"   # journal, live, rollback_target, put_back, hook_or_put_back
PLAN_NS=edgekit-bundle

die() { echo "install_bundle: $*" >&2; exit 1; }
usage() { echo "usage: install_bundle.sh stage-validate ROOT APP DIR | activate ROOT APP" \
  "RELEASE | rollback ROOT APP" >&2; exit 2; }
safe() {  # safe WHAT VALUE: a plain name (no path, no shell meaning)
  case $2 in ''|.*|*[!A-Za-z0-9._-]*) die "unexpected $1 '$2'" ;; esac
}
signers() {
  s=/etc/edgekit/allowed_signers
  [ -f "$s" ] || s=${HOME:-.}/.edgekit/allowed_signers
  echo "$s"
}

# plan_get KEY: the value of the plan's line "KEY VALUE"
plan_get() { sed -n "s/^$1 //p" "$plan" | head -n 1; }

check_plan_signature() {   # the plan's signature, as verify.sh checks the manifest's
  s=$(signers)
  [ -f "$plan.sig" ] || die "the plan is not signed (no edgekit-plan.sig)"
  [ -f "$s" ] || die "no trusted signers on this device ($s)"
  command -v ssh-keygen >/dev/null 2>&1 || die "ssh-keygen not found: cannot check signatures"
  who=$(ssh-keygen -Y find-principals -s "$plan.sig" -f "$s" 2>/dev/null | head -n 1) || true
  who=${who%%,*}
  [ -n "$who" ] || die "the plan is signed by a key that is not in $s"
  ssh-keygen -Y verify -f "$s" -I "$who" -n "$PLAN_NS" -s "$plan.sig" < "$plan" \
    >/dev/null 2>&1 || die "edgekit-plan does not match its signature by $who"
}

# --- reading .npy / raw outputs -------------------------------------------------------------
# npy_info FILE: sets npy_off (bytes before the data), npy_descr, npy_shape ("1,10"; "" for a
# scalar); 1 if FILE is no .npy file numpy or IREE writes.
npy_info() {
  set -- "$1" $(od -An -v -tu1 -N12 "$1" 2>/dev/null)
  [ $# -eq 13 ] && [ "$2" = 147 ] && [ "$3" = 78 ] && [ "$4" = 85 ] || return 1
  case $8 in
    1) npy_off=$((10 + ${10} + 256 * ${11})) ;;
    2|3) npy_off=$((12 + ${10} + 256 * ${11} + 65536 * ${12} + 16777216 * ${13})) ;;
    *) return 1 ;;
  esac
  [ "$npy_off" -le 65600 ] || return 1
  header=$(head -c "$npy_off" "$1" | tail -c +11 | tr -d ' \n')
  npy_descr=$(printf '%s' "$header" | sed -n "s/.*'descr':'\([^']*\)'.*/\1/p")
  npy_shape=$(printf '%s' "$header" | sed -n "s/.*'shape':(\([0-9,]*\)).*/\1/p")
  npy_shape=${npy_shape%,}
  case $header in *"'fortran_order':False"*) ;; *) return 1 ;; esac
  case $header in *"'shape':("*) ;; *) return 1 ;; esac
  [ -n "$npy_descr" ]
}
# out_fields K I: the plan's line for output I of sample K, as variables
out_fields() {
  set -- $(sed -n "s/^out $1 $2 //p" "$plan" | head -n 1)
  [ $# -eq 12 ] || die "edgekit-plan: a malformed line for output $2 of sample $1"
  file=$1 golden=$2 codec=$3 descr=$4 shape=$5 atol=$6 rtol=$7 mincos=$8 exact=$9
  top1=${10} judge=${11} name=${12}
  [ "$shape" != scalar ] || shape=
}
count_of() {  # count_of SHAPE: the number of elements
  n=1
  for d in $(printf '%s' "$1" | tr ',' ' '); do n=$((n * d)); done
  echo "$n"
}
# decode CODEC FILE OFFSET COUNT: one value per line (%.17g, nan, inf, -inf; integers as
# written), decoded from the bits; fails if FILE does not hold COUNT values after OFFSET.
decode() {
  codec=$1 file=$2 off=$3 count=$4
  case $codec in
    f32) width=4 od=u4 ;; f64) width=8 od=u4 ;; f16|bf16) width=2 od=u2 ;;
    i8) width=1 od=d1 ;; i16) width=2 od=d2 ;; i32) width=4 od=d4 ;; i64) width=8 od=d8 ;;
    u8|b1) width=1 od=u1 ;; u16) width=2 od=u2 ;; u32) width=4 od=u4 ;; u64) width=8 od=u8 ;;
    *) echo "cannot read $codec outputs on the device" >&2; return 1 ;;
  esac
  size=$(wc -c < "$file")
  [ "$size" -eq $((off + count * width)) ] || {
    echo "$(basename "$file") holds $((size - off)) data bytes, expected $((count * width))" >&2
    return 1; }
  [ "$count" -gt 0 ] || return 0
  tail -c +$((off + 1)) "$file" | od -An -v -t"$od" | awk -v codec="$codec" '
    function ieee(u, ebits, mbits,   s, e, m, bias, v, top) {
      top = 2 ^ (ebits + mbits); s = (u >= top); if (s) u -= top
      e = int(u / 2 ^ mbits); m = u - e * 2 ^ mbits; bias = 2 ^ (ebits - 1) - 1
      if (e == 2 ^ ebits - 1) return m ? "nan" : (s ? "-inf" : "inf")
      if (e == 0) v = m * 2 ^ (1 - bias - mbits)
      else v = (2 ^ mbits + m) * 2 ^ (e - bias - mbits)
      return sprintf("%.17g", s ? -v : v)
    }
    {
      for (i = 1; i <= NF; i++) {
        if (codec == "f32") print ieee($i, 8, 23)
        else if (codec == "f16") print ieee($i, 5, 10)
        else if (codec == "bf16") print ieee($i, 8, 7)
        else if (codec == "f64") {
          if (!half) { lo = $i; half = 1; continue }
          half = 0; hi = $i; s = (hi >= 2 ^ 31); if (s) hi -= 2 ^ 31
          e = int(hi / 2 ^ 20); m = (hi - e * 2 ^ 20) * 2 ^ 32 + lo
          if (e == 2047) { print (m ? "nan" : (s ? "-inf" : "inf")); continue }
          v = (e == 0) ? m * 2 ^ -1074 : (2 ^ 52 + m) * 2 ^ (e - 1075)
          printf "%.17g\n", s ? -v : v
        } else print $i
      }
    }'
}

# awk helpers shared by the comparison and the golden check
AWK_LIB='
function finite(x) { return x != "nan" && x != "inf" && x != "-inf" }
function abs(x) { return x < 0 ? -x : x }
'

# compare NAME ACTUAL_TXT GOLDEN_TXT ATOL RTOL MINCOS EXACT TOP1 ROW: one line; 0 if it passes
compare() {
  awk -v name="$1" -v atol="$4" -v rtol="$5" -v mincos="$6" -v exact="$7" -v top1="$8" \
      -v row="$9" "$AWK_LIB"'
    NR == FNR { a[++na] = $1; next }
    { e[++ne] = $1 }
    END {
      if (na != ne) { printf "%s: %d values, expected %d\n", name, na, ne; exit 1 }
      bad = 0; strict = exact && atol == 0 && rtol == 0
      if (strict) {
        for (i = 1; i <= ne; i++) if ((a[i] "") != (e[i] "")) { if (!differ++) at = i }
        if (differ) { printf "%s: %d of %d values differ (first at %d: %s, expected %s)\n",
                      name, differ, ne, at - 1, a[at], e[at]; bad = 1 }
      }
      maxabs = 0; ma = 0; me = 0; beyond = 0; nonfin = 0
      for (i = 1; i <= ne; i++) {
        fa = finite(a[i]); fe = finite(e[i])
        if (!fa || !fe) { if ((a[i] "") != (e[i] "") && !nonfin++) nat = i; continue }
        x = a[i] + 0; y = e[i] + 0; d = abs(x - y)
        if (d > maxabs) maxabs = d
        if (d > atol + rtol * abs(y)) beyond++
        if (abs(x) > ma) ma = abs(x); if (abs(y) > me) me = abs(y)
      }
      if (nonfin) { printf "%s: NaN/Inf at %d place(s) where the reference differs (first at " \
                    "%d: %s, expected %s)\n", name, nonfin, nat - 1, a[nat], e[nat]; bad = 1 }
      if (beyond && !strict) { printf "%s: max abs error %.3g exceeds atol %.3g + rtol %.3g" \
                               "*|expected| at %d of %d values\n", name, maxabs, atol, rtol,
                               beyond, ne; bad = 1 }
      if (!exact && ma > 0 && me > 0 && me > atol) {
        dot = 0; na2 = 0; ne2 = 0
        for (i = 1; i <= ne; i++) if (finite(a[i]) && finite(e[i])) {
          x = a[i] / ma; y = e[i] / me; dot += x * y; na2 += x * x; ne2 += y * y }
        cs = dot / sqrt(na2 * ne2); if (cs > 1) cs = 1; if (cs < -1) cs = -1
        if (!(cs >= mincos)) { printf "%s: cosine %.6f below %s\n", name, cs, mincos; bad = 1 }
      }
      if (top1 && row > 0) {
        rows = 0; agree = 0
        for (r = 0; r * row < ne; r++) {
          ia = argmax(a, r * row, row); ie = argmax(e, r * row, row); rows++
          if (ia == ie) agree++
        }
        if (agree < rows) { printf "%s: top-1 agreement %.1f%%\n", name, 100 * agree / rows
                            bad = 1 }
      }
      if (!bad) printf "%s: ok (max abs error %.3g)\n", name, maxabs
      exit bad
    }
    function cls(x) { return x == "inf" ? 2 : (x == "-inf" ? 0 : 1) }
    function greater(x, b) { return cls(x) > cls(b) || (cls(x) == 1 && cls(b) == 1 && x + 0 > b + 0) }
    function argmax(v, start, n,   i, bi) {  # numpy: the first NaN, else the first largest
      bi = 1
      for (i = 1; i <= n; i++) {
        if (v[start + i] == "nan") return i
        if (i > 1 && greater(v[start + i] "", v[start + bi] "")) bi = i
      }
      return bi
    }' "$2" "$3"
}

# uninformative ATOL RTOL EXACT INPUTS_DIFFER GOLDEN_TXT...: a reason if the golden values of
# one output (one file per sample) cannot tell a right module from a wrong one (golden.py)
uninformative() {
  atol=$1 rtol=$2 exact=$3 differ=$4
  shift 4
  awk -v atol="$atol" -v rtol="$rtol" -v exact="$exact" -v differ="$differ" "$AWK_LIB"'
    FNR == 1 { s++ } { v[s, FNR] = $1; n[s] = FNR }
    function tol(x) { return atol + rtol * abs(x) }
    END {
      strict = exact && atol == 0 && rtol == 0; reasons = 0
      for (k = 1; k <= s; k++) {
        why = ""; m = n[k]
        if (m == 0) continue
        fin = 0; zero = 1; lo = ""; hi = ""
        for (i = 1; i <= m; i++) {
          if (finite(v[k, i])) { fin++; x = v[k, i] + 0
            if (lo == "" || x < lo) lo = x; if (hi == "" || x > hi) hi = x }
          if (!finite(v[k, i]) || v[k, i] + 0 != 0) zero = 0
        }
        if (fin == 0) why = "all " m " values are NaN/Inf"
        else if (fin < m) why = ""
        else if (zero) why = "all " m " values are 0"
        else if (m >= 2) {
          one = 1
          if (strict) { for (i = 2; i <= m; i++) if (v[k, i] "" != v[k, 1] "") one = 0 }
          else { mid = (hi + lo) / 2
                 for (i = 1; i <= m; i++) if (abs(v[k, i] - mid) > tol(v[k, i])) one = 0 }
          if (one) why = "all " m " values are within its tolerance of one value"
        }
        if (why == "") break
        reasons++; first = (first == "" ? why : first)
      }
      if (reasons == s && s > 0) { print first (s > 1 ? " on every sample" : ""); exit 0 }
      if (s < 2 || !differ) exit 1
      for (k = 2; k <= s; k++) if (n[k] != n[1]) exit 1
      if (n[1] == 0) exit 1
      for (i = 1; i <= n[1]; i++) {
        lo = ""; hi = ""
        for (k = 1; k <= s; k++) { if (!finite(v[k, i])) exit 1; x = v[k, i] + 0
          if (lo == "" || x < lo) lo = x; if (hi == "" || x > hi) hi = x }
        mid = (hi + lo) / 2
        for (k = 1; k <= s; k++)
          if (strict ? v[k, i] "" != v[1, i] "" : abs(v[k, i] - mid) > tol(v[k, i])) exit 1
      }
      print "it is the same for all " s " validation samples (within its tolerance): a " \
            "module that ignores its inputs would pass"
    }' "$@"
}

# check_output LABEL ACTUAL GOLDEN SCRATCH: compare one output file with its golden .npy under
# the limits out_fields set; one line on stderr; 0 if it passes
check_output() {
  label=$1 actual=$2 gfile=$3 scratch=$4
  count=$(count_of "$shape")
  row=${shape##*,}
  [ -n "$shape" ] || row=0
  if [ ! -f "$actual" ]; then
    echo "$label: no output file ${actual##*/}" >&2; return 1
  fi
  case $actual in
    *.npy)
      npy_info "$actual" || { echo "$label: ${actual##*/} is not a .npy file" >&2; return 1; }
      if [ "$npy_descr" != "$descr" ] || [ "$npy_shape" != "$shape" ]; then
        echo "$label: dtype $npy_descr shape ($npy_shape), expected $descr ($shape)" >&2
        return 1
      fi
      off=$npy_off ;;
    *) off=0 ;;
  esac
  npy_info "$gfile" || { echo "$label: golden ${gfile##*/} is not a .npy file" >&2; return 1; }
  if ! decode "$codec" "$actual" "$off" "$count" > "$scratch/a.txt" ||
      ! decode "$codec" "$gfile" "$npy_off" "$count" > "$scratch/e.txt"; then
    echo "$label: unreadable" >&2; return 1
  fi
  line=$(compare "$label" "$scratch/a.txt" "$scratch/e.txt" "$atol" "$rtol" "$mincos" \
           "$exact" "$top1" "$row") && status=0 || status=1
  echo "$line" >&2
  return "$status"
}

# --- stage-validate --------------------------------------------------------------------------
validate_release() {  # validate_release RELDIR SCRATCH: 0 if every sample's outputs pass
  rel=$1 work=$2
  samples=$(plan_get samples)
  inputs_differ=$(plan_get inputs_differ)
  ok=0
  # the golden check: each output over all samples
  for i in $(sed -n 's/^out 0 \([0-9]*\) .*/\1/p' "$plan"); do
    out_fields 0 "$i"
    [ "$judge" = 1 ] || continue
    files=
    k=0
    while [ "$k" -lt "$samples" ]; do
      out_fields "$k" "$i"
      g=$work/golden_${k}_$i.txt
      npy_info "$rel/$golden" || { echo "install_bundle: $golden is not a .npy file" >&2
                                   return 1; }
      decode "$codec" "$rel/$golden" "$npy_off" "$(count_of "$shape")" > "$g" || return 1
      files="$files $g"
      k=$((k + 1))
    done
    # shellcheck disable=SC2086
    out_fields 0 "$i"
    if why=$(uninformative "$atol" "$rtol" "$exact" "$inputs_differ" $files); then
      echo "install_bundle: golden output '$name' cannot tell a right module from a wrong" \
        "one: $why (accept it knowingly with validation: {accept_uninformative: [$name]})" >&2
      return 1
    fi
  done
  k=0
  while [ "$k" -lt "$samples" ]; do
    out=$work/sample_$k
    if ! sh "$here/run.sh" "$runtime" "$rel" "$out" "$k" >/dev/null 2>"$work/run_$k.err"; then
      echo "install_bundle: sample $k: iree-run-module failed on the device:" \
        "$(tail -n 1 "$work/run_$k.err" | cut -c1-300)" >&2
      return 1
    fi
    for i in $(sed -n "s/^out $k \\([0-9]*\\) .*/\\1/p" "$plan"); do
      out_fields "$k" "$i"
      check_output "sample $k output $name" "$out/$file" "$rel/$golden" "$work" || ok=1
    done
    k=$((k + 1))
  done
  return "$ok"
}

stage_validate() {  # stage_validate DIR
  dir=$1
  [ -d "$dir" ] || die "no payload directory $dir"
  dir=$(cd "$dir" && pwd)
  plan=$dir/edgekit-plan
  [ -f "$plan" ] && [ ! -L "$plan" ] || die "the payload has no edgekit-plan"
  check_plan_signature
  [ "$(sed -n 1p "$plan")" = "edgekit-plan 1" ] || die "edgekit-plan: unknown format"
  [ "$(plan_get app)" = "$appname" ] || \
    die "the payload is a release of '$(plan_get app)', not '$appname'"
  release=$(plan_get release)
  safe release "$release"
  safe "runtime version" "$(plan_get runtime)"
  runtime=$root/runtime/iree-$(plan_get runtime)-$(uname -m)
  [ -x "$runtime/bin/iree-run-module" ] || \
    die "no IREE runtime $(plan_get runtime) for $(uname -m) in $root/runtime (edgekit agent" \
        "install or edgekit provision puts it there)"
  mkdir -p "$app/releases"
  tag=pull-$$
  staging=$app/.staging-$tag
  work=$app/.validation-$tag
  rm -rf "$staging" "$work"
  trap 'rm -rf "$staging" "$work" "$app/.trash-$tag"' EXIT
  mkdir -p "$staging" "$work"
  # the release's own files only: verify.sh refuses any other name
  (cd "$dir" && find . -path ./edgekit-plan -prune -o -path ./edgekit-plan.sig -prune -o \
     -type f -print) | while IFS= read -r f; do
    mkdir -p "$staging/$(dirname "$f")"
    cp "$dir/$f" "$staging/$f"
  done
  why=$(sh "$here/verify.sh" "$staging" 2>&1) || die "${why#verify: }"
  rel=$app/releases/$release
  if ! sh "$here/verify.sh" "$rel" >/dev/null 2>&1; then
    if [ -e "$rel" ]; then     # a corrupted copy: replaced, unless it is live
      [ "$(live)" != "$release" ] || die "release $release is current on this device and" \
        "corrupted; \`edgekit deploy\` repairs it in place"
      mv -T "$rel" "$app/.trash-$tag"
    fi
    mv -T "$staging" "$rel"
  fi
  if validate_release "$rel" "$work"; then
    journal validated "$release"
    echo "$release"
    return 0
  fi
  journal rejected "$release"
  if [ "$release" != "$(live)" ] && [ "$release" != "$(rollback_target)" ]; then
    rm -rf "$rel"
  fi
  back="the app has no current release"
  [ -z "$(live)" ] || back="\`current\` still points at $(live)"
  echo "install_bundle: on-device validation failed: release $release was not activated;" \
    "$back" >&2
  exit 3
}

# --- activate / rollback ---------------------------------------------------------------------
run_hook() {  # run_hook NAME RELEASE PREVIOUS: the plan's hook; a failure puts PREVIOUS back
  command=$(sed -n "s/^hook $1 //p" "$app/.plan-$2" 2>/dev/null | head -n 1)
  [ "$command" != - ] || command=
  timeout=$(sed -n 's/^hook_timeout //p' "$app/.plan-$2" | head -n 1)
  hook_or_put_back "$1" "$2" "$3" "${timeout:-60}" "$(printf '%b' "$command")" || exit 1
}

activate_release() {  # activate_release RELEASE
  release=$1
  safe release "$release"
  sh "$here/verify.sh" "$app/releases/$release" >/dev/null || \
    die "release $release is not a whole, signed release here (stage-validate it first)"
  grep -q "\"event\": \"validated\", \"release\": \"$release\"" "$app/journal.jsonl" \
    2>/dev/null || die "release $release was never validated on this device"
  previous=$(live)
  if [ "$previous" != "$release" ]; then
    sh "$here/activate.sh" "$app" "$release"
    [ "$(readlink "$app/current")" = "releases/$release" ] || \
      die "\`current\` does not point at $release after activation"
  fi
  run_hook after_activate "$release" "$previous"
  run_hook health "$release" "$previous"
  created=$(sed -n 's/^created //p' "$app/.plan-$release" 2>/dev/null | head -n 1)
  newest=$(cut -d' ' -f1 "$app/newest" 2>/dev/null) || newest=
  if [ -n "$created" ] && { [ -z "$newest" ] || [ "$created" \> "$newest" ]; }; then
    printf '%s %s\n' "$created" "$release" > "$app/.newest.$$"
    mv -f "$app/.newest.$$" "$app/newest"
  fi
  echo "$release"
}

rollback_release() {
  back=$(rollback_target)
  [ -n "$back" ] || die "no earlier release of $appname to go back to"
  safe release "$back"
  sh "$here/verify.sh" "$app/releases/$back" >/dev/null || \
    die "release $back is not whole here: \`current\` stays on $(live)"
  sh "$here/activate.sh" "$app" "$back"
  journal rollback "$back"
  echo "$back"
}

if [ "${1:-}" = compare-output ]; then
  # compare-output ACTUAL GOLDEN CODEC DESCR SHAPE ATOL RTOL MINCOS EXACT TOP1: one output
  # file against its golden one, as stage-validate compares them (tests, debugging)
  [ $# -eq 11 ] || usage
  codec=$4 descr=$5 shape=$6 atol=$7 rtol=$8 mincos=$9 exact=${10} top1=${11}
  [ "$shape" != scalar ] || shape=
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  check_output output "$2" "$3" "$scratch"
  exit $?
fi
[ $# -ge 3 ] || usage
cmd=$1 root=$2 appname=$3
safe app "$appname"
case $root in /*) ;; *) root=$PWD/$root ;; esac
app=$root/apps/$appname
case $cmd in
  stage-validate)
    [ $# -eq 4 ] || usage
    mkdir -p "$app"
    stage_validate "$4"
    # the plan stays beside the release: activate reads its hooks from it
    cp "$plan" "$app/.plan-$release.$$" && mv -f "$app/.plan-$release.$$" "$app/.plan-$release" ;;
  activate) [ $# -eq 4 ] || usage; activate_release "$4" ;;
  rollback) [ $# -eq 3 ] || usage; rollback_release ;;
  *) usage ;;
esac
