"""The interface of an NPU family (a profile's `npu.kind`), like the model frontends' `Frontend`:
everything edgekit knows of a family lives in its own module (pipeline/npu/<family>.py), and the
build, the cache keys, the manifest and the renderers ask it through this class (the registry,
npu/registry.py, maps a profile's kind to it; a target without `npu:` has no family).

What a family answers:
- `plan_edits`: what it does to `edgekit build`'s plan for a target (stages it adds, or that
  replace the CPU path's: its own quantizer, packaging without a module) — one checked plan;
- `toolchains` / `versions`: its venvs and their versions, part of the build key and manifest;
- its manifest payload: an `NpuPart` (the NpuNote and the files under npu/) that its stages
  hand to `package` on the compiled module, or to `npu_only` (npu/bundle.py);
- `summary`: the lines `edgekit build` prints about that payload;
- `partition`: where each op would run, for `edgekit check` (a family that places ops only
  while it compiles says so).
The device probe is the profile's data (`npu.device_files`, `libraries`, `kernel_module`),
read by device/npu_preflight.py and runtime_shims/npu_probe.sh for every family alike.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError
from edgekit.models.bundle import NpuNote, NpuOp
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.stages import Edit
from edgekit.toolchain import venvs


@dataclass(frozen=True)
class SummaryLine:
    """One line of a family's summary: plain text (the renderer escapes it) and a style name
    ("cyan": a figure that is an estimate, never a measurement)."""

    text: str
    style: str = ""


@dataclass(frozen=True)
class Partitioned:
    """What `edgekit check` learns from a family's partitioner: the model as the NPU build
    quantizes it, each op's placement, and how many NPU partitions it makes."""

    quantized: ExportedModel
    ops: tuple[NpuOp, ...]
    partitions: int


class NpuFamily(abc.ABC):
    kind: ClassVar[str]                       # the profile's `npu.kind`
    toolchains: ClassVar[tuple[str, ...]]     # its venvs (toolchain/venvs.py)
    places_ops: ClassVar[bool] = False        # `partition` answers before any build

    def versions(self) -> dict[str, dict[str, str]]:
        """Its venvs' versions, by venv (for the build key and manifest); ToolchainMissing
        (exit 5, naming the install command) when one is not installed."""
        return {name: venvs.versions(name) for name in self.toolchains}

    def installed_versions(self) -> dict[str, dict[str, str]] | None:
        """The same, torch-free and quiet (the source key): None when one is not installed
        (no record matches; the build itself says what to install)."""
        if not all(venvs.toolchain(name).installed() for name in self.toolchains):
            return None
        return self.versions()

    @abc.abstractmethod
    def plan_edits(self, target: Target) -> tuple[Edit, ...]:
        """What this family does to the CPU path's plan for `target` (pipeline/build.py's
        `plan_for`), by stage name. Called once per build: its stages may share that build's
        state through the object they close over."""

    @abc.abstractmethod
    def summary(self, note: NpuNote) -> tuple[SummaryLine, ...]:
        """What `edgekit build` prints about a bundle's NPU part: where ops run, what
        validated its numbers (never the NPU), the compiler's estimate (labelled so)."""

    def partition(self, recipe: Recipe, exported: ExportedModel, target: Target,
                  workdir: Path, calibration: list) -> Partitioned:
        """Where each op would run (`edgekit check MODEL --target T`), for a family whose
        `places_ops`."""
        self.refuse_unless_it_places_ops(target)
        raise NotImplementedError(f"{type(self).__name__} says it places ops: it must "
                                  "implement partition")

    def refuse_unless_it_places_ops(self, target: Target) -> None:
        """A family that places ops only while it compiles refuses `edgekit check`, naming the
        build instead (before any model is loaded)."""
        if not self.places_ops:
            raise ConfigError(f"target {target.name}: NPU kind '{self.kind}' places ops only "
                              "while it compiles; `edgekit build` reports where each op ran",
                              where=target.source, key="npu.kind")
