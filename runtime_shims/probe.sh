#!/bin/sh
# Device probe: prints key=value lines about this machine. Needs only POSIX sh and coreutils;
# runs before anything is installed (the host sends it on stdin). $1: deploy root (.edgekit).
root=${1:-.edgekit}
kv() { printf '%s=%s\n' "$1" "$2"; }

kv arch "$(uname -m)"
kv kernel "$(uname -r)"
if [ -r /etc/os-release ]; then
  kv os "$(. /etc/os-release && printf '%s' "${PRETTY_NAME:-$NAME}")"
fi
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
[ -n "$glibc" ] || glibc=$(ldd --version 2>/dev/null | head -n1 | awk '{print $NF}')
kv glibc "$glibc"
kv cores "$(getconf _NPROCESSORS_ONLN 2>/dev/null || grep -c ^processor /proc/cpuinfo)"
kv mem_kb "$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null)"

# CPU identity and features as the kernel reports them (x86: "flags", arm: "Features").
kv cpu_model "$(awk -F': *' '/^(model name|Model|Hardware)[[:space:]]*:/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)"
kv cpu_part "$(awk -F': *' '/^CPU part/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)"
kv cpu_flags "$(awk -F': *' '/^(flags|Features)[[:space:]]*:/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)"
# The dynamic loader's view of the hardware capabilities (right even under emulation, where
# /proc/cpuinfo shows the emulating host's CPU).
kv hwcap "$(LD_SHOW_AUXV=1 /bin/true 2>/dev/null | awk -F': *' '/^AT_HWCAP:/ {print $2}')"
kv hwcap2 "$(LD_SHOW_AUXV=1 /bin/true 2>/dev/null | awk -F': *' '/^AT_HWCAP2:/ {print $2}')"

# the free space where the deploy root is (or will be: a probe creates nothing, so a dry run
# leaves the device as it found it)
at=$root
while [ ! -d "$at" ] && [ "$at" != / ] && [ "$at" != . ]; do at=$(dirname "$at"); done
kv free_kb "$(df -Pk "$at" 2>/dev/null | awk 'NR==2 {print $4}')"

if command -v vulkaninfo >/dev/null 2>&1; then
  vulkaninfo --summary 2>/dev/null | awk -F'= *' '/deviceName/ {print "vulkan_device=" $2}'
fi
for node in /dev/rknpu* /dev/dri/renderD* /dev/apex_* /dev/galcore /dev/vipcore /dev/accel/*; do
  [ -e "$node" ] && kv npu_node "$node"
done
for dir in "$root"/runtime/iree-*; do
  [ -x "$dir/bin/iree-run-module" ] && kv runtime "${dir##*/}"
done
for dir in "$root"/shims/*; do
  [ -f "$dir/run.sh" ] && kv shims "${dir##*/}"
done
exit 0
