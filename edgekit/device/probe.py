"""`edgekit probe`: what a device is, and whether it can execute a given bundle.

The probe shim is sent on stdin (`sh -s`), so it works on a device where nothing is installed.
"""

from __future__ import annotations

import pydantic

from edgekit.config.resources import shims_dir
from edgekit.config.schema_base import Frozen
from edgekit.device.answers import ascii_int
from edgekit.device.layout import ROOT
from edgekit.errors import DeviceError, printable
from edgekit.transport.base import Transport

SHIMS = shims_dir()

# Linux arm64 AT_HWCAP / AT_HWCAP2 bits (arch/arm64/include/uapi/asm/hwcap.h) for the LLVM
# features our profiles use.
ARM64_HWCAP = {"neon": (1, 1), "fp-armv8": (1, 0), "fullfp16": (1, 10), "dotprod": (1, 20),
               "sve": (1, 22), "i8mm": (2, 13), "bf16": (2, 14)}
# /proc/cpuinfo names for LLVM feature names where they differ.
CPUINFO_NAME = {"neon": "asimd", "fullfp16": "asimdhp", "dotprod": "asimddp",
                "fp-armv8": "fp", "sse4.1": "sse4_1", "sse4.2": "sse4_2"}


class DeviceInfo(Frozen):
    arch: str
    kernel: str = ""
    os: str = ""
    glibc: str = ""
    cores: int = 0
    mem_kb: int = 0
    cpu_model: str = ""
    cpu_part: str = ""
    cpu_flags: tuple[str, ...] = ()
    hwcap: int | None = None
    hwcap2: int | None = None
    free_kb: int = 0
    vulkan_devices: tuple[str, ...] = ()
    npu_nodes: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ()
    shims: tuple[str, ...] = ()

    def has_cpu_feature(self, feature: str) -> bool | None:
        """True/False when known; None when the device does not say."""
        if self.arch == "aarch64" and feature in ARM64_HWCAP:
            word, bit = ARM64_HWCAP[feature]
            value = self.hwcap if word == 1 else self.hwcap2
            if value is not None:
                return bool(value >> bit & 1)
        if not self.cpu_flags or not _flags_match_arch(self.cpu_flags, self.arch):
            return None
        # LLVM spells x86 features with '-' where /proc/cpuinfo has '_' (amx-fp16, amx_fp16)
        return CPUINFO_NAME.get(feature, feature.replace("-", "_")) in self.cpu_flags


def hwcap_features(info: DeviceInfo) -> tuple[str, ...]:
    """The LLVM feature names the arm64 AT_HWCAP/AT_HWCAP2 bits say the CPU has."""
    if info.arch != "aarch64":
        return ()
    return tuple(f for f in ARM64_HWCAP if info.has_cpu_feature(f))


def _flags_match_arch(flags: tuple[str, ...], arch: str) -> bool:
    # Under qemu user emulation /proc/cpuinfo is the host's: x86 flags on an aarch64 device.
    x86 = "sse2" in flags
    return x86 == (arch == "x86_64")


# What a probe's numbers may be (the device is not trusted: a number out of range is read as
# "not said", never as a huge free disk or a crash): a 64-bit hwcap word, a million cores,
# 2^50 KiB (an exbibyte) of memory or disk.
HWCAP_MAX = (1 << 64) - 1
MAX_VALUE_CHARS = 4096          # /proc/cpuinfo's flags line is ~1.5 kB on a recent x86
MAX_LIST_ITEMS = 64             # Vulkan devices, NPU nodes, runtimes, shim versions
NUMBER_MAX = {"cores": 1 << 20, "mem_kb": 1 << 50, "free_kb": 1 << 50}


def parse_probe(text: str) -> DeviceInfo:
    fields: dict = {"vulkan_devices": [], "npu_nodes": [], "runtimes": [], "shims": []}
    lists = {"vulkan_device": "vulkan_devices", "npu_node": "npu_nodes", "runtime": "runtimes",
             "shims": "shims"}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        # device text, bounded and with its control characters escaped before it is kept
        value = printable(value.strip()[:MAX_VALUE_CHARS])
        if key in lists:
            if len(fields[lists[key]]) < MAX_LIST_ITEMS:
                fields[lists[key]].append(value)
        elif key == "cpu_flags":
            fields[key] = tuple(value.split())
        elif key in ("hwcap", "hwcap2"):
            fields[key] = ascii_int(value, HWCAP_MAX, base=16)
        elif key in ("cores", "mem_kb", "free_kb"):
            fields[key] = ascii_int(value, NUMBER_MAX[key]) or 0
        elif key in DeviceInfo.model_fields:
            fields[key] = value
    flags, arch = fields.get("cpu_flags", ()), fields.get("arch", "")
    if flags and arch and not _flags_match_arch(flags, arch):
        # user-mode emulation (qemu): /proc/cpuinfo describes the host; the CPU the device's
        # programs see is only known from the kernel's auxiliary vector (AT_HWCAP)
        host = fields.get("cpu_model") or "another CPU"
        fields.update(cpu_model=f"emulated {arch} (/proc/cpuinfo describes the host: {host})",
                      cpu_flags=(), cpu_part="")
    try:
        return DeviceInfo.model_validate(fields)
    except pydantic.ValidationError as exc:  # a device that printed something unexpected
        raise DeviceError(f"unexpected probe output: {exc.errors()[0]['msg']}") from None


def probe(conn: Transport) -> DeviceInfo:
    script = (SHIMS / "probe.sh").read_bytes()
    result = conn.run(["sh", "-s", "--", ROOT], stdin=script, what="device probe failed")
    return parse_probe(result.text)
