"""What an NPU stage adds to a bundle: its files and the manifest's NpuNote."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgekit.models.bundle import NpuNote


@dataclass(frozen=True)
class NpuPart:
    note: NpuNote
    files: dict[str, Path] = field(default_factory=dict)   # bundle-relative name → made file
