#!/usr/bin/env bash
# Installs everything edgekit and its tests need on a fresh Debian machine (run as root):
# software Vulkan (Mesa llvmpipe) for GPU profiles, OpenSSH for lab devices, qemu user
# emulation + debootstrap for aarch64 lab devices, Chromium (the tests open the HTML
# benchmark report in it), the pinned Python toolchain, and edgekit
# itself in editable mode. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(mesa-vulkan-drivers libvulkan1 vulkan-tools openssh-server openssh-client
              qemu-user-static binfmt-support debootstrap chromium procps)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# torch is pinned to the 2.13.0 CPU build: an unpinned torch pulls a multi-GB CUDA build.
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -r .ci/requirements.txt
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps -e .
