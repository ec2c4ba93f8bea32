"""The NPU families by the profile's `npu.kind`: an explicit table, imported lazily (a CPU
build never loads NPU code). A target without `npu:` has no family: the CPU path's plan."""

from __future__ import annotations

import importlib

from edgekit.config.profiles import Target
from edgekit.errors import ConfigError
from edgekit.models.bundle import NpuNote
from edgekit.pipeline.npu.family import NpuFamily, SummaryLine

# kind → "module:class" (the registration list: the only place the families are named)
FAMILIES: dict[str, str] = {
    "ethos-u": "edgekit.pipeline.npu.ethos:EthosU",
    "rknpu": "edgekit.pipeline.npu.rknn:Rknpu",
}


def family_named(kind: str) -> NpuFamily:
    try:
        module, name = FAMILIES[kind].split(":")
    except KeyError:
        raise ConfigError(f"no NPU family '{kind}'", key="npu.kind",
                          hint=f"expected one of: {', '.join(FAMILIES)}") from None
    family = getattr(importlib.import_module(module), name)()
    if family.kind != kind:
        raise ConfigError(f"NPU family {FAMILIES[kind]} builds '{family.kind}', not '{kind}'")
    return family


def family_for(target: Target) -> NpuFamily | None:
    """The family of the target's NPU; None for a target without one (the CPU path)."""
    return family_named(target.npu.kind) if target.npu is not None else None


def summary(note: NpuNote) -> tuple[SummaryLine, ...]:
    """A bundle's NPU part as its family tells it; a kind this edgekit does not know (a
    bundle from another version) gets one plain line instead of a failure."""
    if note.kind not in FAMILIES:
        return (SummaryLine(f"  npu ({note.accelerator}): {note.kind}, {len(note.ops)} ops; "
                            "not a family this edgekit knows"),)
    return family_named(note.kind).summary(note)
