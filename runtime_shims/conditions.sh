#!/bin/sh
# conditions.sh: key=value lines about how busy, hot and fast the device is right now.
kv() { printf '%s=%s\n' "$1" "$2"; }
kv cores "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)"
read -r l1 l5 l15 _ < /proc/loadavg && kv loadavg "$l1 $l5 $l15"
# CPU busy share over the last half second (what else runs right now; the load average still
# remembers our own previous benchmark for a minute).
busy() { awk '/^cpu / {idle=$5+$6; total=0; for (i=2; i<=NF; i++) total+=$i; print idle, total}' /proc/stat; }
set -- $(busy); idle0=$1; total0=$2
sleep 0.5
set -- $(busy); idle1=$1; total1=$2
kv cpu_busy_pct "$(awk -v i="$((idle1 - idle0))" -v t="$((total1 - total0))" 'BEGIN { if (t > 0) printf "%.0f", 100 * (1 - i / t); else print 0 }')"
kv mem_available_kb "$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
for cpu in /sys/devices/system/cpu/cpu[0-9]*; do
  [ -r "$cpu/cpufreq/scaling_cur_freq" ] && kv "freq_khz.${cpu##*/}" "$(cat "$cpu/cpufreq/scaling_cur_freq")"
  [ -r "$cpu/cpufreq/scaling_governor" ] && kv "governor.${cpu##*/}" "$(cat "$cpu/cpufreq/scaling_governor")"
done
for zone in /sys/class/thermal/thermal_zone*; do
  [ -r "$zone/temp" ] && kv "temp_mc.$(cat "$zone/type" 2>/dev/null || echo "${zone##*/}")" "$(cat "$zone/temp")"
done
if command -v vcgencmd >/dev/null 2>&1; then
  kv throttled "$(vcgencmd get_throttled 2>/dev/null | sed 's/.*=//')"
fi
exit 0
