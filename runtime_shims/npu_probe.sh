#!/bin/sh
# NPU probe: does this device have what an NPU release needs? Sent on stdin (`sh -s`), so it
# runs where nothing is installed; reads only, changes nothing. Arguments, each one quoted by
# the host: dev=PATH (a device file), lib=NAME (a runtime library), module=NAME (a kernel
# driver). Prints one key=value line per argument:
#   device_file=PATH present|missing
#   library=NAME PATH|missing
#   driver=NAME VERSION-TEXT|loaded|missing
kv() { printf '%s=%s\n' "$1" "$2"; }
arch=$(uname -m 2>/dev/null)
for arg in "$@"; do
  case $arg in
    dev=/*)
      file=${arg#dev=}
      if [ -e "$file" ]; then kv device_file "$file present"; else kv device_file "$file missing"; fi ;;
    lib=?*)
      name=${arg#lib=}
      found=
      # Debian's multiarch folders for this machine (x86_64-linux-gnu, aarch64-linux-gnu, ...)
      # beside the plain ones: an ordinary user's shell may have no ldconfig to ask
      for dir in /usr/lib /usr/lib64 /usr/local/lib /lib /lib64 "/usr/lib/$arch-linux-gnu" \
                 "/lib/$arch-linux-gnu" /usr/lib/aarch64-linux-gnu /lib/aarch64-linux-gnu \
                 /usr/lib/arm-linux-gnueabihf /lib/arm-linux-gnueabihf /vendor/lib64; do
        if [ -e "$dir/$name" ]; then found=$dir/$name; break; fi
      done
      if [ -z "$found" ]; then
        # ldconfig lives in /sbin, which a user's PATH (Debian's, a non-login ssh) often lacks
        for ldconfig in "$(command -v ldconfig 2>/dev/null)" /sbin/ldconfig /usr/sbin/ldconfig; do
          [ -n "$ldconfig" ] && [ -x "$ldconfig" ] || continue
          found=$("$ldconfig" -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')
          break
        done
      fi
      kv library "$name ${found:-missing}" ;;
    module=?*)
      mod=${arg#module=}
      version=
      # the rknpu driver's own version file (debugfs, or procfs where debugfs is absent),
      # else a loadable module's version
      for file in "/sys/kernel/debug/$mod/version" "/proc/debug/$mod/driver_version" \
                  "/proc/debug/$mod/version" "/sys/module/$mod/version"; do
        if [ -r "$file" ]; then
          version=$(head -n 1 "$file" 2>/dev/null)
          [ -n "$version" ] && break
        fi
      done
      if [ -z "$version" ]; then      # present, version unreadable (debugfs is root's)
        [ -d "/sys/module/$mod" ] && version=loaded
        for link in /sys/class/drm/*/device/driver /sys/class/misc/*/device/driver; do
          [ -e "$link" ] || continue
          [ "$(basename "$(readlink "$link")")" = "$mod" ] && version=loaded
        done
      fi
      kv driver "$mod ${version:-missing}" ;;
    *) echo "npu_probe: unknown argument $arg" >&2; exit 2 ;;
  esac
done
exit 0
