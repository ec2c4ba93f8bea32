#!/bin/sh
# agent.sh poll [CONFIG]: one poll of an edgekit release channel, without Python (run by a
# systemd timer or cron; `edgekit agent install` puts it and CONFIG on the device).
#
# CONFIG (default ~/.edgekit/agent/config), `key value` lines:
#   url URL       the channel (http(s)://server/NAME); its index is URL/index (+ .sig), its
#                 files URL/../blobs/<sha256>, the status reports go to URL/status/DEVICE.json
#   device ID     this device's id (the rollout bucket and the report's name)
#   root DIR      edgekit's device root (~/.edgekit); shims DIR: the shims install_bundle.sh
#                 and its siblings lie in
#   fetch curl|wget  optional: the downloader (default: curl if there, else wget)
#
# Each poll: fetch the index and its signature; verify it (ssh-keygen -Y verify, namespace
# edgekit-bundle, against /etc/edgekit/allowed_signers or ~/.edgekit/allowed_signers); refuse
# an index for another channel or older (serial) than the newest accepted; stop if the channel
# is paused, the release is current, failed here before, or this device's bucket
# (sha256("SEED:DEVICE:RELEASE")'s first 8 hex digits mod 10000) is not under percent*100;
# download the files this device lacks (a content-addressed cache; resumed after a cut), check
# every sha256, then install_bundle.sh stage-validate + activate (validation on the device,
# rollback on a failed hook). Whatever happened is PUT as a small JSON to the status location.
# Exit 0 when the device is where the channel wants it (or waits by policy), 1 otherwise.
#
# agent.sh install-timer auto|systemd|cron INTERVAL_S: run `agent.sh poll` every INTERVAL_S
# seconds: a systemd timer (the user's manager, or the system's for root), else a crontab
# line (minutes); prints the kind installed; exit 4 if neither is there.
set -u
export LC_ALL=C
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
if [ "${1:-}" = install-timer ]; then
  kind=${2:-auto} every=${3:-300}
  case $every in ''|*[!0-9]*) echo "agent: bad interval" >&2; exit 2 ;; esac
  if [ "$kind" != cron ]; then
    if [ "$(id -u)" = 0 ] && [ -d /run/systemd/system ]; then
      units=/etc/systemd/system ctl="systemctl"
    elif systemctl --user show-environment >/dev/null 2>&1; then
      units=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user ctl="systemctl --user"
    else
      units=
    fi
    if [ -n "$units" ]; then
      mkdir -p "$units"
      printf '[Unit]\nDescription=edgekit release channel poll\n\n[Service]\nType=oneshot\nExecStart=/bin/sh %s poll\n' \
        "$self" > "$units/edgekit-agent.service"
      printf '[Unit]\nDescription=edgekit release channel poll timer\n\n[Timer]\nOnBootSec=60\nOnUnitActiveSec=%s\nRandomizedDelaySec=%s\n\n[Install]\nWantedBy=timers.target\n' \
        "$every" "$((every / 5 + 1))" > "$units/edgekit-agent.timer"
      $ctl daemon-reload && $ctl enable --now edgekit-agent.timer >/dev/null 2>&1 &&
        { echo systemd; exit 0; }
      echo "agent: systemd did not take the timer" >&2; exit 4
    fi
    [ "$kind" = auto ] || { echo "agent: no systemd here" >&2; exit 4; }
  fi
  if command -v crontab >/dev/null 2>&1; then
    minutes=$(( (every + 59) / 60 ))
    { crontab -l 2>/dev/null | grep -v '# edgekit-agent$'
      echo "*/$minutes * * * * /bin/sh $self poll >/dev/null 2>&1 # edgekit-agent"; } |
      crontab - && { echo cron; exit 0; }
  fi
  echo "agent: neither systemd nor cron on this device" >&2
  exit 4
fi
[ "${1:-}" = poll ] || { echo "usage: agent.sh poll [CONFIG] | install-timer KIND S" >&2
                         exit 2; }
conf=${2:-${HOME:-.}/.edgekit/agent/config}
[ -f "$conf" ] || { echo "agent: no config $conf" >&2; exit 2; }
get() { sed -n "s/^$1 //p" "$conf" | head -n 1; }
url=$(get url) device=$(get device) root=$(get root) shims=$(get shims)
url=${url%/}
channel=${url##*/}
base=${url%/*}
case $device in ''|.*|*[!A-Za-z0-9._-]*) echo "agent: bad device id '$device'" >&2; exit 2 ;; esac
case $url in http://*|https://*) ;; *) echo "agent: url must be http(s)" >&2; exit 2 ;; esac
state=$root/agent
mkdir -p "$state/blobs" || exit 1
INDEX_MAX=262144

fetcher=$(get fetch)       # curl | wget; absent: curl if there, else wget
case $fetcher in
  curl|wget) command -v "$fetcher" >/dev/null 2>&1 ||
    { echo "agent: $fetcher not found" >&2; exit 1; } ;;
  *) if command -v curl >/dev/null 2>&1; then fetcher=curl
     elif command -v wget >/dev/null 2>&1; then fetcher=wget
     else echo "agent: neither curl nor wget on this device" >&2; exit 1; fi ;;
esac

# fetch URL FILE MAXBYTES [resume]: GET into FILE (continuing a partial FILE with resume)
fetch() {
  if [ "$fetcher" = curl ]; then
    curl -fsS --connect-timeout 10 --max-time 600 --max-filesize "$3" \
      ${4:+-C -} -o "$2" "$1"
  else
    wget -q -T 30 ${4:+-c} -O "$2" "$1"
  fi
}
put() {  # put FILE URL
  if [ "$fetcher" = curl ]; then
    curl -fsS --connect-timeout 10 --max-time 30 -T "$1" "$2" >/dev/null
  else
    wget -q -T 30 --method=PUT --body-file="$1" -O /dev/null "$2"
  fi
}

release= app= current= serial=0 bytes=0
report() {  # report STATE DETAIL [EXIT]: PUT the status JSON, then exit
  detail=$(printf '%s' "$2" | tr -d '"\\' | tr -c 'A-Za-z0-9 ._:;,/()=+%@`<>*|-' ' ' |
    cut -c1-300)
  [ -z "$app" ] || current=$(readlink "$root/apps/$app/current" 2>/dev/null) || current=
  current=${current##*/}
  printf '{"device": "%s", "channel": "%s", "app": "%s", "release": "%s", "current": "%s",' \
    "$device" "$channel" "$app" "$release" "$current" > "$state/report.json"
  printf ' "state": "%s", "detail": "%s", "serial": %s, "bytes": %s, "ts": %s}\n' \
    "$1" "$detail" "$serial" "$bytes" "$(date +%s)" >> "$state/report.json"
  put "$state/report.json" "$url/status/$device.json" ||
    echo "agent: the status report could not be sent" >&2
  [ "$1" = current ] || [ "$1" = updated ] || [ "$1" = waiting ] || [ "$1" = paused ] ||
    echo "agent: $1: $2" >&2
  rm -rf "$state/lock"
  exit "${3:-0}"
}

# one poll at a time (a timer and a manual poll): a lock directory holding the poll's pid
if ! mkdir "$state/lock" 2>/dev/null; then
  other=$(cat "$state/lock/pid" 2>/dev/null) || other=
  if [ -n "$other" ] && kill -0 "$other" 2>/dev/null; then
    echo "agent: another poll ($other) is running" >&2; exit 0
  fi
  rm -rf "$state/lock"; mkdir "$state/lock" || exit 1
fi
echo $$ > "$state/lock/pid"
trap 'rm -rf "$state/lock" "$state/payload-$$" "$state/index.new" "$state/index.new.sig"' EXIT

# 1. the index and its signature
rm -f "$state/index.new" "$state/index.new.sig"
if ! fetch "$url/index.sig" "$state/index.new.sig" 16384 ||
    ! fetch "$url/index" "$state/index.new" "$INDEX_MAX"; then
  echo "agent: the channel $url cannot be reached" >&2
  rm -rf "$state/lock"; exit 1
fi
signers=/etc/edgekit/allowed_signers
[ -f "$signers" ] || signers=${HOME:-.}/.edgekit/allowed_signers
command -v ssh-keygen >/dev/null 2>&1 || report refused "ssh-keygen not found" 1
who=$(ssh-keygen -Y find-principals -s "$state/index.new.sig" -f "$signers" 2>/dev/null |
  head -n 1) || who=
who=${who%%,*}
[ -n "$who" ] || report refused "the index is signed by a key that is not in $signers" 1
ssh-keygen -Y verify -f "$signers" -I "$who" -n edgekit-bundle -s "$state/index.new.sig" \
  < "$state/index.new" >/dev/null 2>&1 ||
  report refused "the index does not match its signature by $who" 1

idx=$state/index.new
val() { sed -n "s/^$1 //p" "$idx" | head -n 1; }
[ "$(sed -n 1p "$idx")" = "edgekit-channel 1" ] || report refused "not an edgekit index" 1
[ "$(val channel)" = "$channel" ] || report refused "the index is for channel '$(val channel)'" 1
arch=$(uname -m)
serial=$(val serial) app=$(val app) percent=$(val percent) seed=$(val seed) paused=$(val paused)
release=$(sed -n "s/^release $arch \([^ ]*\) .*/\1/p" "$idx" | head -n 1)
[ -n "$release" ] || { release=none; nothing=1; }
for v in "$serial" "$percent"; do
  case $v in ''|*[!0-9]*) report refused "a malformed index" 1 ;; esac
done
for v in "$app" "$release" "$seed"; do
  case $v in ''|.*|*[!A-Za-z0-9._-]*) app= release=; report refused "a malformed index" 1 ;; esac
done
[ -z "${nothing:-}" ] || { release=; report waiting "the channel has no release for $arch"; }
last=$(cat "$state/serial" 2>/dev/null) || last=0
case $last in ''|*[!0-9]*) last=0 ;; esac
[ "$serial" -ge "$last" ] ||
  report refused "index serial $serial is older than the newest accepted ($last)" 1
echo "$serial" > "$state/serial.tmp" && mv -f "$state/serial.tmp" "$state/serial"

# 2. the rollout policy
current=$(readlink "$root/apps/$app/current" 2>/dev/null) || current=
[ "${current##*/}" != "$release" ] || report current "release $release is current"
[ ! -f "$state/failed-$release" ] ||
  report failed "failed here before: $(cat "$state/failed-$release")" 0
[ "$paused" != 1 ] || report paused "the channel is paused"
h=$(printf '%s' "$seed:$device:$release" | sha256sum | cut -c1-8)
b=$(( 0x$h % 10000 ))
[ "$b" -lt $((percent * 100)) ] || report waiting "bucket $b is not under $((percent * 100))"

# 3. the files this device lacks, resumed, each sha256 checked
files=$(sed -n "s/^file $arch //p" "$idx")
printf '%s\n' "$files" | while read -r sha size path; do
  case $sha in *[!0-9a-f]*|'') exit 1 ;; esac
  case $size in *[!0-9]*|'') exit 1 ;; esac
  case $path in .*|*/.*|*[!A-Za-z0-9._/-]*|*//*|/*) exit 1 ;; esac
done || report refused "a malformed file entry in the index" 1
for line in $(printf '%s\n' "$files" | tr ' ' ':'); do
  sha=${line%%:*} rest=${line#*:}
  size=${rest%%:*}
  blob=$state/blobs/$sha
  [ ! -f "$blob" ] || continue
  part=$blob.part
  have=$( [ -f "$part" ] && wc -c < "$part" || echo 0)
  [ "$have" -le "$size" ] || { rm -f "$part"; have=0; }
  if [ "$have" -lt "$size" ] || [ "$size" -eq 0 ]; then
    if ! fetch "$base/blobs/$sha" "$part" "$size" resume; then
      got=$( [ -f "$part" ] && wc -c < "$part" || echo 0)
      bytes=$((bytes + got - have))
      report interrupted "the download of $sha stopped at $got of $size bytes (resumed next poll)" 1
    fi
  fi
  got=$(wc -c < "$part")
  bytes=$((bytes + got - have))
  if [ "$(sha256sum < "$part" | cut -c1-64)" != "$sha" ]; then
    rm -f "$part"
    report refused "file $sha does not match its sha256: nothing was staged" 1
  fi
  mv -f "$part" "$blob"
done
payload=$state/payload-$$
rm -rf "$payload"
for line in $(printf '%s\n' "$files" | tr ' ' ':'); do
  sha=${line%%:*} path=${line##*:}
  mkdir -p "$payload/$(dirname "$path")"
  cp "$state/blobs/$sha" "$payload/$path"
done

# 4. stage, validate on the device, activate (install_bundle.sh: the pushed deploy's journal)
out=$(sh "$shims/install_bundle.sh" stage-validate "$root" "$app" "$payload" 2>&1)
code=$?
if [ "$code" -ne 0 ]; then
  why=$(printf '%s\n' "$out" | grep -v ': ok (max abs error' | tr '\n' ' ' | cut -c1-280)
  [ "$code" -ne 3 ] || echo "validation: $why" > "$state/failed-$release"
  report failed "${why:-stage-validate exited with $code}" 1
fi
if ! out=$(sh "$shims/install_bundle.sh" activate "$root" "$app" "$release" 2>&1); then
  echo "activation: $(printf '%s' "$out" | tail -n 1)" > "$state/failed-$release"
  report failed "$(printf '%s' "$out" | tail -n 1)" 1
fi
# the cache keeps the files of the release now current: the next release fetches only the rest
for blob in "$state"/blobs/*; do
  [ -f "$blob" ] || continue
  name=${blob##*/}
  case $name in *.part) continue ;; esac
  printf '%s\n' "$files" | grep -q "^$name " || rm -f "$blob"
done
report updated "release $release is current"
