"""Preflight for NPU releases: does the device have the NPU its target profile names?

The profile's `npu:` section lists the device files, runtime libraries and kernel driver the
board's NPU stack needs; npu_probe.sh (sent on stdin, every argument quoted) reports each of
them. A device that lacks one cannot run the release's NPU part: deploy refuses (exit 14),
naming what is missing, unless the user asks for `--cpu-fallback`: the bundle's IREE CPU module
of the same model, deployed and validated like any CPU release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from edgekit.config.profiles import NpuSpec
from edgekit.config.resources import shims_dir
from edgekit.transport.base import Transport

PROBE = "npu_probe.sh"
FALLBACK_HINT = ("nothing was uploaded; `--cpu-fallback` deploys the bundle's IREE CPU module "
                 "(module.vmfb) instead, validated on the device like any CPU release")


@dataclass(frozen=True)
class NpuFound:
    """What npu_probe.sh found: each device file (present or not), each library (its path or
    None), the kernel driver (its version text, "loaded" when the version is unreadable, or
    None when absent)."""

    device_files: dict[str, bool] = field(default_factory=dict)
    libraries: dict[str, str | None] = field(default_factory=dict)
    driver: tuple[str, str | None] | None = None

    @property
    def driver_version(self) -> str | None:
        """The driver's version number (e.g. 0.9.6) when its version text has one."""
        if self.driver is None or self.driver[1] is None:
            return None
        found = re.search(r"v?(\d+(?:\.\d+)+)", self.driver[1])
        return found.group(1) if found else None


def probe_arguments(npu: NpuSpec) -> list[str]:
    return ([f"dev={f}" for f in npu.device_files] + [f"lib={name}" for name in npu.libraries]
            + ([f"module={npu.kernel_module}"] if npu.kernel_module else []))


def parse_npu_probe(text: str) -> NpuFound:
    files: dict[str, bool] = {}
    libraries: dict[str, str | None] = {}
    driver = None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        name, _, state = value.strip().partition(" ")
        if not sep or not name:
            continue
        if key == "device_file":
            files[name] = state == "present"
        elif key == "library":
            libraries[name] = None if state == "missing" else state
        elif key == "driver":
            driver = (name, None if state == "missing" else state)
    return NpuFound(files, libraries, driver)


def probe_npu(conn: Transport, npu: NpuSpec) -> NpuFound:
    script = (shims_dir() / PROBE).read_bytes()
    result = conn.run(["sh", "-s", "--", *probe_arguments(npu)], stdin=script,
                      what="NPU probe failed")
    return parse_npu_probe(result.text)


def npu_problems(npu: NpuSpec, found: NpuFound) -> list[str]:
    """Why the device cannot run the release's NPU part (empty: it can)."""
    what = f"the {npu.accelerator} NPU"
    problems = [f"no {path} on the device ({what}'s device file)"
                for path in npu.device_files if not found.device_files.get(path)]
    problems += [f"no {name} on the device ({what}'s runtime library)"
                 for name in npu.libraries if not found.libraries.get(name)]
    if npu.kernel_module and (found.driver is None or found.driver[1] is None):
        problems.append(f"no {npu.kernel_module} kernel driver ({what}'s; no "
                        f"/sys/kernel/debug/{npu.kernel_module}/version or "
                        f"/sys/module/{npu.kernel_module})")
    return problems


def describe(npu: NpuSpec, found: NpuFound) -> str:
    """One line on the NPU the device has, for the deploy's report."""
    driver = ""
    if found.driver and found.driver[1]:
        driver = f", {found.driver[0]} driver {found.driver_version or found.driver[1]}"
    libs = ", ".join(f"{name} at {path}" for name, path in found.libraries.items() if path)
    return f"{npu.accelerator} NPU found{driver}" + (f" ({libs})" if libs else "")
