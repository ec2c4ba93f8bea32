#!/usr/bin/env bash
# Installs everything edgekit and its tests need on a fresh Debian machine (run as root):
# software Vulkan (Mesa llvmpipe) for GPU profiles, OpenSSH for lab devices, qemu user
# emulation (registered with binfmt_misc) + mmdebstrap and uidmap (the arm64 userland, built
# without root) for aarch64 lab devices, Chromium (the tests open the HTML
# benchmark report in it), nginx (the pull-channel tests serve a channel and take the devices'
# status PUTs with it, started as the invoking user), the pinned Python toolchain, and edgekit
# itself in editable mode. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(mesa-vulkan-drivers libvulkan1 vulkan-tools openssh-server openssh-client
              qemu-user-static binfmt-support mmdebstrap uidmap chromium procps
              mender-artifact mender-client nginx curl
              llvm)  # llvm-objdump, llvm-dwarfdump, llvm-mca: `edgekit inspect --kernels`
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# arm64 programs run through qemu from inside the lab's rootfs: binfmt_misc's qemu-aarch64
# entry (with the F flag, as qemu-user-static registers it) is machine-wide, so root's to set
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if ! head -1 /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null | grep -qx enabled; then
  update-binfmts --enable qemu-aarch64
fi

# torch is pinned to the 2.13.0 CPU build: an unpinned torch pulls a multi-GB CUDA build.
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore -r .ci/requirements.txt
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps -e .

# NPU compilers in their own venvs (conflicting pins: tosa-tools numpy < 2.2, executorch):
# ExecuTorch's Arm backend, tosa-tools and Vela for the Ethos-U tests (tests/npu). Installed
# in the machine's shared folder, readable by every user (edgekit looks there after the
# user's own cache; root's cache would serve root alone); kept when already there.
SHARED_TOOLCHAINS=/opt/edgekit/toolchains
(umask 022 && EDGEKIT_TOOLCHAINS_DIR=$SHARED_TOOLCHAINS python3 -m edgekit toolchains install npu)

# The Rockchip NPU compiler (rknn-toolkit2: Rockchip's proprietary licence, accepted here for
# CI) in its own venv in the same shared folder; kept when already there.
(umask 022 && EDGEKIT_TOOLCHAINS_DIR=$SHARED_TOOLCHAINS \
    python3 -m edgekit toolchains install rknn --accept-licence)
