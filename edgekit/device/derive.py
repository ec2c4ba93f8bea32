"""`edgekit targets derive HOST`: a target profile written from what the device says it is.

Pure logic over a probe (DeviceInfo): the CPU from /proc/cpuinfo's `CPU part` where it is the
device's own (on Arm hardware), its features from AT_HWCAP/AT_HWCAP2 (right under qemu too,
where /proc/cpuinfo is the host's), the Vulkan device's name → an IREE Vulkan target. Every
value carries a comment saying where it came from; the profile `extends:` the nearest family.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
# Vulkan vendor ids (vulkaninfo's vendorID: PCI-SIG ids, or Khronos ids for vendors without
# one) → (IREE Vulkan target, the vendor deploy matches). Preferred over the name when the
# device reports them. Intel and Mesa's llvmpipe have no tuned IREE target: the baseline.
VULKAN_VENDORS = {
    0x13B5: ("valhall", "Mali"),        # Arm (Mali)
    0x5143: ("adreno", "Adreno"),       # Qualcomm (Adreno)
    0x1002: ("rdna3", "AMD"),           # AMD (Radeon)
    0x10DE: ("ampere", "NVIDIA"),       # NVIDIA
    0x8086: (VULKAN_BASELINE, ""),      # Intel
    0x10005: (VULKAN_BASELINE, ""),     # Mesa (llvmpipe, a CPU rasterizer)
}


# What the probe does not read: every core's CPU part (big.LITTLE) and the device tree's
# board name. Plain POSIX tools; empty output where the files are absent (x86, qemu-user).
BOARD_FACTS = ("awk -F': *' '/^processor/ {p=$2} /^CPU part/ {print \"part\", p, $2}' "
               "/proc/cpuinfo 2>/dev/null; "
               "[ -r /proc/device-tree/compatible ] && printf 'compatible %s\\n' "
               "\"$(tr '\\0' ' ' < /proc/device-tree/compatible)\"; "
               # the first Vulkan device's ids and driver (the probe reads only its name)
               "command -v vulkaninfo >/dev/null 2>&1 && vulkaninfo --summary 2>/dev/null | "
               "awk -F'= *' '/^GPU[0-9]/ {n++} n==1 && /vendorID|deviceID|driverName/ "
               "{gsub(/[ \\t]/, \"\", $1); print \"vk\", $1, $2}'; true")


@dataclass(frozen=True)
class BoardFacts:
    core_parts: dict[int, str]       # core index → CPU part (from /proc/cpuinfo, per core)
    compatible: str = ""             # the device tree's compatible strings
    vulkan: dict[str, str] = field(default_factory=dict)  # vendorID, deviceID, driverName

    @classmethod
    def parse(cls, text: str) -> "BoardFacts":
        parts, compatible, vulkan = {}, "", {}
        for line in text.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[0] == "part" and fields[1].isascii() \
                    and fields[1].isdigit() and len(fields[1]) < 8:
                parts[int(fields[1])] = fields[2].lower()
            elif fields[:1] == ["compatible"]:
                compatible = " ".join(fields[1:])
            elif fields[:1] == ["vk"] and len(fields) >= 3:
                vulkan.setdefault(fields[1], " ".join(fields[2:]))
        return cls(parts, compatible, vulkan)



@dataclass(frozen=True)
class Derived:
    cpu_profile: str              # YAML text, commented
    gpu_profile: str | None       # YAML text for the Vulkan device, if the device has one


def derive(info: DeviceInfo, name: str, address: str,
           facts: BoardFacts = BoardFacts({})) -> Derived:
    if info.arch != "aarch64":
        raise DeviceIncompatible(
            f"targets derive writes aarch64 board profiles; {address} is {info.arch}",
            where=address, hint="for this machine's own CPU use `--target host`")
    lines = [f"# Derived by `edgekit targets derive {address}` from the device's probe.",
             f"description: {_quote(_describe(info, name))}",
             "extends: aarch64-generic   # the family of every 64-bit Arm Linux board",
             "cpu:"]
    part = info.cpu_part.lower()
    clusters = _clusters(facts.core_parts)
    if len(clusters) > 1:   # big.LITTLE: code for the big cores (the LITTLE ones run it too)
        part = clusters[0][0]
        lines.insert(1, "# big.LITTLE: " + "; ".join(
            f"cores {_span(cores)} {ARM_PARTS.get(p, p)} ({p})" for p, cores in clusters)
            + f". Pin to the big cores: taskset -c {_span(clusters[0][1])}")
    if facts.compatible:
        lines.insert(1, f"# device tree compatible: {facts.compatible}")
    if part in ARM_PARTS:
        lines.append(f"  cpu: {ARM_PARTS[part]}   # /proc/cpuinfo: CPU part {part} (Arm)"
                     + (" of the big cores" if len(clusters) > 1 else ""))
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
    big = len(clusters[0][1]) if len(clusters) > 1 else 0
    threads = sorted({1, big or info.cores} - {0})
    lines += ["tune:",
              f"  threads: {threads}   # probe: {info.cores} cores (nproc)"
              + (f", {big} of them big" if big else ""),
              f"# memory: {info.mem_kb // 1024} MiB (MemTotal); free disk under ~/.edgekit: "
              f"{info.free_kb // 1024} MiB"]
    if info.npu_nodes:
        lines.append(f"# NPU device nodes seen: {', '.join(info.npu_nodes)} (no NPU backend is "
                     "derived)")
    return Derived("\n".join(lines) + "\n", _gpu(info, name, address, facts.vulkan))


def vulkan_target(device: str) -> tuple[str, str]:
    """(IREE Vulkan target, the vendor to match) for a Vulkan device name."""
    lowered = device.lower()
    for needle, target, vendor in VULKAN_TARGETS:
        if needle in lowered:
            return target, vendor
    return VULKAN_BASELINE, ""


def vulkan_target_by_id(vendor_id: str) -> tuple[str, str] | None:
    """(IREE Vulkan target, the vendor to match) for a vendorID such as '0x13b5'; None when
    the id is not one edgekit knows (or not a number)."""
    try:
        return VULKAN_VENDORS.get(int(vendor_id, 16))
    except ValueError:
        return None


def _gpu(info: DeviceInfo, name: str, address: str,
         ids: dict[str, str] | None = None) -> str | None:
    if not info.vulkan_devices:
        return None
    device = info.vulkan_devices[0]
    ids = ids or {}
    by_id = vulkan_target_by_id(ids.get("vendorID", ""))
    target, vendor = by_id or vulkan_target(device)
    why = f"vulkaninfo: {device}"
    if by_id:
        why = (f"vulkaninfo: vendorID {ids['vendorID']}, deviceID {ids.get('deviceID', '?')}, "
               f"driver {ids.get('driverName', '?')} ({device})")
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


def _clusters(core_parts: dict[int, str]) -> list[tuple[str, list[int]]]:
    """(part, cores) per kind of core, the biggest first (the later in Arm's table, the
    bigger: a76 after a55; unknown parts last)."""
    by_part: dict[str, list[int]] = {}
    for core, part in sorted(core_parts.items()):
        by_part.setdefault(part, []).append(core)
    order = list(ARM_PARTS)
    rank = {p: order.index(p) if p in order else -1 for p in by_part}
    bigness = {"0xd03": 0, "0xd04": 0, "0xd05": 1, "0xd46": 1}   # LITTLE cores
    return sorted(by_part.items(), key=lambda kv: (bigness.get(kv[0], 2), rank[kv[0]]),
                  reverse=True)


def _span(cores: list[int]) -> str:
    return f"{cores[0]}-{cores[-1]}" if cores == list(range(cores[0], cores[-1] + 1)) \
        and len(cores) > 1 else ",".join(map(str, cores))
