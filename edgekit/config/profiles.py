"""Target profiles: YAML data in `targets/` (or a path) resolved through `extends:`.

A board is added by writing a YAML file, never code. Lookup order for a name: the directories in
$EDGEKIT_TARGETS_PATH (colon-separated), `./targets` in the working directory, then the profiles
that ship with edgekit.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import platform
import re
from pathlib import Path
from typing import Literal

import pydantic

from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.config.resources import targets_dir
from edgekit.config.schema_base import Frozen
from edgekit.config.timeouts import Timeouts
from edgekit.config.yamlsrc import YamlDoc, load_yaml, validate
from edgekit.errors import ConfigError

Lowering = Literal["tosa", "linalg", "torch"]
LOWERINGS: tuple[str, ...] = ("tosa", "linalg", "torch")
BUILTIN_TARGETS_DIR = targets_dir()


class CpuSpec(Frozen):
    """LLVM CPU codegen target. `triple` omitted means the host's triple."""

    triple: str | None = None
    cpu: str = pydantic.Field(description="LLVM CPU name, e.g. cortex-a72, or 'host'")
    features: str = ""


class CpuVariant(Frozen):
    """One more CPU module in the same bundle (e.g. a core with dotprod beside the baseline):
    deploy runs the first variant whose CPU features the device has, else the baseline."""

    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
                               description="names the module: variants/<name>.vmfb")
    cpu: CpuSpec


class VulkanSpec(Frozen):
    target: str = pydantic.Field(description="IREE Vulkan target, e.g. valhall, rdna3, ampere")
    device_match: tuple[str, ...] = pydantic.Field(
        default=(), description="substrings of the Vulkan device name this target is made for "
                                "(case-insensitive); empty: any Vulkan device")


class NpuSpec(Frozen):
    """The board's NPU: what the NPU compiler is told and what preflight must find on the device.
    The integer part of a model runs there; ops without an integer (TOSA PRO-INT) form fall back
    to the CPU part (`cpu:`), compiled by IREE."""

    kind: Literal["ethos-u", "rknpu"] = pydantic.Field(
        description="ethos-u: Arm Ethos-U, compiled by Vela; rknpu: Rockchip NPU, by rknn-toolkit2")
    accelerator: str = pydantic.Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Vela --accelerator-config (e.g. ethos-u65-256) or the rknn target platform "
                    "(e.g. rk3588)")
    system_config: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Vela --system-config: the SoC's clocks and memory ports (vela.ini)")
    memory_mode: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="Vela --memory-mode, e.g. Shared_Sram, Dedicated_Sram, Sram_Only")
    device_files: tuple[str, ...] = pydantic.Field(
        default=(), description="device files preflight must find, e.g. /dev/ethosu0")
    libraries: tuple[str, ...] = pydantic.Field(
        default=(), description="runtime libraries preflight must find on the board (file names "
                                "searched in the usual library directories)")
    kernel_module: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="kernel driver preflight reads the version of (e.g. rknpu)")

    @pydantic.field_validator("device_files")
    @classmethod
    def _device_paths(cls, files: tuple[str, ...]) -> tuple[str, ...]:
        for f in files:   # sent to the device's probe: plain /dev paths only
            if not re.fullmatch(r"/dev/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*", f) or ".." in f:
                raise ValueError(f"device file {f!r}: expected a path under /dev/")
        return files

    @pydantic.field_validator("libraries")
    @classmethod
    def _library_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", name):
                raise ValueError(f"library {name!r}: expected a file name (e.g. librknnrt.so)")
        return names


class RuntimeSpec(Frozen):
    driver: Literal["local-sync", "local-task", "vulkan"] = "local-task"


class TuneSpec(Frozen):
    """What `edgekit tune` tries for this target: named iree-compile flag sets (added after the
    profile's `flags`) and runtime thread counts. `default` (no extra flags) is always tried."""

    flag_sets: dict[str, tuple[str, ...]] = pydantic.Field(default_factory=dict)
    threads: tuple[int, ...] = (1,)
    # where candidates are timed: `in-process` (IREE's Python runtime, as edgekit.compile and
    # the Python API call a module), `tools` (iree-benchmark-module, as a device's shims run
    # it), `auto`: in-process for a target this machine runs, the device's tools with --host
    runtime: Literal["auto", "in-process", "tools"] = "auto"

    @pydantic.field_validator("flag_sets")
    @classmethod
    def _flags_look_like_flags(cls, sets: dict[str, tuple[str, ...]]) -> dict:
        for name, flags in sets.items():
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$", name):
                raise ValueError(f"flag set names use letters, digits, . + _ - (got {name!r})")
            for flag in flags:
                if not flag.startswith("--"):
                    raise ValueError(f"flag set {name!r}: flags start with '--' (got {flag!r})")
            parse_edgekit_flags(flags)
        return sets

    @pydantic.field_validator("threads")
    @classmethod
    def _threads_positive(cls, threads: tuple[int, ...]) -> tuple[int, ...]:
        if not threads or min(threads) < 1:
            raise ValueError("threads: one or more counts >= 1")
        return threads


class Target(Frozen):
    """A resolved target profile (after `extends:`)."""

    name: str
    description: str = ""
    arch: Literal["x86_64", "aarch64", "any"] = pydantic.Field(
        description="CPU arch the module's code needs; 'any' for GPU (SPIR-V) modules; "
                    "'host' means this machine's")
    backend: Literal["llvm-cpu", "vulkan-spirv", "none"] = pydantic.Field(
        description="IREE backend of the module; `none`: no CPU/GPU module at all "
                    "(a microcontroller NPU: artifact and estimates only, nothing to deploy)")
    cpu: CpuSpec | None = None
    variants: tuple[CpuVariant, ...] = pydantic.Field(
        default=(), description="more CPU modules in the bundle, best first; deploy runs the "
                                "first the device supports, else `cpu:` (the baseline)")
    vulkan: VulkanSpec | None = None
    npu: NpuSpec | None = pydantic.Field(
        default=None, description="an NPU beside the CPU: its integer part runs there")
    runtime: RuntimeSpec = RuntimeSpec()
    lowering: tuple[Lowering, ...] = pydantic.Field(
        default=("tosa", "linalg", "torch"),
        description="lowerings in order of preference; `lowering: auto` tries them in order")
    flags: tuple[str, ...] = pydantic.Field(default=(), description="extra iree-compile flags")
    quantize_flags: dict[Literal["int8", "int8-weights", "fp16"], tuple[str, ...]] = \
        pydantic.Field(default_factory=dict,
                       description="extra iree-compile flags for quantized builds, per mode "
                                   "(after `flags`; `edgekit tune` variants still apply)")
    tune: TuneSpec = pydantic.Field(default_factory=lambda: TuneSpec(),
                                    description="flag sets and threads `edgekit tune` tries")
    timeouts: Timeouts | None = pydantic.Field(
        default=None, exclude=True,
        description="deadlines for talking to devices of this target (e.g. longer for a slow "
                    "board); not part of the profile's fingerprint")
    source: str = pydantic.Field(default="", description="file the profile came from")

    @pydantic.field_validator("arch", mode="before")
    @classmethod
    def _resolve_host_arch(cls, value: object) -> object:
        return host_arch() if value == "host" else value

    @pydantic.model_validator(mode="after")
    def _backend_has_its_settings(self) -> "Target":
        if self.backend == "llvm-cpu" and self.cpu is None:
            raise ValueError("backend llvm-cpu needs a `cpu:` section (triple, cpu, features)")
        if self.backend == "vulkan-spirv" and self.vulkan is None:
            raise ValueError("backend vulkan-spirv needs a `vulkan:` section with `target:`")
        if self.backend == "none" and self.npu is None:
            raise ValueError("backend none (no CPU/GPU module) is for NPU-only targets: "
                             "add an `npu:` section")
        if not self.lowering:
            raise ValueError("`lowering` must list at least one of: " + ", ".join(LOWERINGS))
        if self.variants and self.backend != "llvm-cpu":
            raise ValueError("`variants` are CPU modules: only for backend llvm-cpu")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must differ (got {', '.join(names)})")
        return self

    def profile(self) -> dict:
        """The profile as it decides a module's bytes: without the file it came from and what
        `edgekit tune` tries (the manifest records this)."""
        return self.model_dump(mode="json", exclude={"source", "tune"})

    def fingerprint(self) -> str:
        """The target's identity in every cache and store (builds, torch.compile graphs, tuning
        records, check verdicts): sha256 of the profile's canonical JSON."""
        return hashlib.sha256(json.dumps(self.profile(), sort_keys=True).encode()).hexdigest()


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def search_dirs() -> list[Path]:
    dirs = [Path(p) for p in os.environ.get("EDGEKIT_TARGETS_PATH", "").split(":") if p]
    dirs += [Path.cwd() / "targets", BUILTIN_TARGETS_DIR]
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in seen:
            seen.append(d.resolve())
    return seen


def available_targets() -> dict[str, Path]:
    """Every profile name found, first directory wins."""
    found: dict[str, Path] = {}
    for d in search_dirs():
        for f in sorted(d.glob("*.yaml")):
            found.setdefault(f.stem, f)
    return found


def load_target(name_or_path: str) -> Target:
    """Resolve a profile by name (see module doc) or by a path to a YAML file."""
    path = _locate(name_or_path)
    doc = _merged(path, chain=())
    return validate(doc, Target, data={**doc.data, "source": str(path)})


def _locate(name_or_path: str) -> Path:
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError("target profile file not found", where=name_or_path)
        return path
    known = available_targets()
    if name_or_path not in known:
        lower = {name.lower(): name for name in known}     # RPI4 is rpi4 too
        close = [lower[c] for c in difflib.get_close_matches(name_or_path.lower(), lower, n=1)]
        raise ConfigError(f"unknown target '{name_or_path}'", key="target",
                          hint=(f"did you mean '{close[0]}'? " if close else "") +
                               f"expected one of: {', '.join(sorted(known))} "
                               "(or a path to a profile YAML)")
    return known[name_or_path]


def _merged(path: Path, chain: tuple[Path, ...]) -> YamlDoc:
    """The profile at `path` with its `extends:` ancestors merged underneath it."""
    if path.resolve() in chain:
        cycle = " -> ".join(p.stem for p in chain + (path.resolve(),))
        raise ConfigError(f"`extends:` cycle: {cycle}", where=f"{path}:1", key="extends")
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise ConfigError("a target profile must be a mapping", where=doc.where(()))
    data = dict(doc.data)
    data.setdefault("name", path.stem)
    parent_name = data.pop("extends", None)
    if parent_name is None:
        return YamlDoc(path, data, doc.lines)
    if not isinstance(parent_name, str):
        raise ConfigError("must be the name of another profile", where=doc.where(("extends",)),
                          key="extends")
    try:
        parent_path = _locate(parent_name)
    except ConfigError as exc:
        raise ConfigError(exc.what, where=doc.where(("extends",)), key="extends",
                          hint=exc.hint) from None
    parent = _merged(parent_path, chain + (path.resolve(),))
    parent_data = {k: v for k, v in parent.data.items() if k not in ("name", "description")}
    return YamlDoc(path, _deep_merge(parent_data, data), {**parent.lines, **doc.lines})


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
