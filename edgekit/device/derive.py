"""`edgekit targets derive HOST`: a target profile written from what the device says it is.

Pure logic over a probe (DeviceInfo): the CPU from /proc/cpuinfo's `CPU part` where it is the
device's own (on Arm hardware), its features from AT_HWCAP/AT_HWCAP2 (right under qemu too,
where /proc/cpuinfo is the host's), the Vulkan device's name → an IREE Vulkan target. Every
value carries a comment saying where it came from; the profile `extends:` the nearest family.
"""

from __future__ import annotations

from dataclasses import dataclass

from edgekit.device.probe import ARM64_HWCAP, DeviceInfo
from edgekit.errors import DeviceIncompatible

# Arm Ltd (implementer 0x41) CPU part numbers → LLVM CPU names (Arm's TRMs; LLVM's
# AArch64TargetParser uses the same ids).
ARM_PARTS = {"0xd03": "cortex-a53", "0xd04": "cortex-a35", "0xd05": "cortex-a55",
             "0xd07": "cortex-a57", "0xd08": "cortex-a72", "0xd09": "cortex-a73",
             "0xd0a": "cortex-a75", "0xd0b": "cortex-a76", "0xd0c": "neoverse-n1",
             "0xd0d": "cortex-a77", "0xd40": "neoverse-v1", "0xd41": "cortex-a78",
             "0xd44": "cortex-x1", "0xd46": "cortex-a510", "0xd47": "cortex-a710",
             "0xd48": "cortex-x2", "0xd49": "neoverse-n2", "0xd4d": "cortex-a715",
             "0xd4e": "cortex-x3"}
# HWCAP features a derived profile asks LLVM for, in this order. SVE is left out: its
# scalable-vector code is not what edgekit validates on boards (NEON code runs on SVE cores).
FEATURES = ("neon", "fullfp16", "dotprod", "i8mm", "bf16")
# Vulkan device name (substring, case-insensitive) → IREE Vulkan target; the first match wins.
# Anything else gets the conservative baseline that llvmpipe and most drivers implement.
VULKAN_TARGETS = (("mali-g", "valhall", "Mali"), ("adreno", "adreno", "Adreno"),
                  ("radeon", "rdna3", "AMD"), ("nvidia", "ampere", "NVIDIA"))
VULKAN_BASELINE = "vp_android_baseline_2022"


@dataclass(frozen=True)
class Derived:
    cpu_profile: str              # YAML text, commented
    gpu_profile: str | None       # YAML text for the Vulkan device, if the device has one


def derive(info: DeviceInfo, name: str, address: str) -> Derived:
    if info.arch != "aarch64":
        raise DeviceIncompatible(
            f"targets derive writes aarch64 board profiles; {address} is {info.arch}",
            where=address, hint="for this machine's own CPU use `--target host`")
    lines = [f"# Derived by `edgekit targets derive {address}` from the device's probe.",
             f"description: {_quote(_describe(info, name))}",
             "extends: aarch64-generic   # the family of every 64-bit Arm Linux board",
             "cpu:"]
    part = info.cpu_part.lower()
    if part in ARM_PARTS:
        lines.append(f"  cpu: {ARM_PARTS[part]}   # /proc/cpuinfo: CPU part {part} (Arm)")
    elif part:
        lines.append(f"  cpu: generic   # /proc/cpuinfo: CPU part {part} is not in edgekit's "
                     "table: features below")
    else:
        lines.append("  cpu: generic   # no CPU part of its own in /proc/cpuinfo (under qemu it "
                     "is the host's): features from AT_HWCAP")
    features = [f for f in FEATURES if info.has_cpu_feature(f)]
    if info.hwcap is not None:
        source = ", ".join(f"{f} = AT_HWCAP{'2' if ARM64_HWCAP[f][0] == 2 else ''} bit "
                           f"{ARM64_HWCAP[f][1]}" for f in features) or "none set"
        lines.append(f"  features: \"{','.join('+' + f for f in features)}\"   # AT_HWCAP "
                     f"{info.hwcap:#x}, AT_HWCAP2 {info.hwcap2 or 0:#x}: {source}")
    else:
        lines.append("  features: \"+neon\"   # the device did not show its AT_HWCAP: the "
                     "family's baseline")
    threads = sorted({1, info.cores} - {0})
    lines += ["tune:",
              f"  threads: {threads}   # probe: {info.cores} cores (nproc)",
              f"# memory: {info.mem_kb // 1024} MiB (MemTotal); free disk under ~/.edgekit: "
              f"{info.free_kb // 1024} MiB"]
    if info.npu_nodes:
        lines.append(f"# NPU device nodes seen: {', '.join(info.npu_nodes)} (no NPU backend is "
                     "derived)")
    return Derived("\n".join(lines) + "\n", _gpu(info, name, address))


def vulkan_target(device: str) -> tuple[str, str]:
    """(IREE Vulkan target, the vendor to match) for a Vulkan device name."""
    lowered = device.lower()
    for needle, target, vendor in VULKAN_TARGETS:
        if needle in lowered:
            return target, vendor
    return VULKAN_BASELINE, ""


def _gpu(info: DeviceInfo, name: str, address: str) -> str | None:
    if not info.vulkan_devices:
        return None
    device = info.vulkan_devices[0]
    target, vendor = vulkan_target(device)
    why = f"vulkaninfo: {device}"
    lines = [f"# Derived by `edgekit targets derive {address}` from the device's probe.",
             f"description: {_quote(f'{name}: Vulkan on {device}')}",
             "extends: vulkan-generic   # Vulkan 1.1 family, runtime driver vulkan",
             "vulkan:",
             f"  target: {target}   # {why}" + ("" if vendor else
                                                 " (no tuned IREE target: the baseline)")]
    if vendor:
        lines.append(f"  device_match: [{vendor}]   # deploy refuses other GPUs for this code")
    return "\n".join(lines) + "\n"


def _describe(info: DeviceInfo, name: str) -> str:
    model = info.cpu_model if info.cpu_part else ""
    return f"{name} ({info.cores}x {model or 'aarch64 CPU'}, {info.mem_kb // 1024} MiB)"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
