"""Plain data of a fleet rollout: the plan (fixed when the rollout starts, so a resume does
exactly what was planned) and the result (rebuilt from the journal, so it is the same whether
the rollout ran in one go or was resumed)."""

from __future__ import annotations

from typing import Literal

import pydantic

from edgekit.config.fleet import FleetDevice, RolloutPolicy
from edgekit.config.recipe import Hooks
from edgekit.config.schema_base import Frozen
from edgekit.models.dataset import DatasetScore

DeviceStatus = Literal["updated", "unchanged", "failed", "rolled-back", "rollback-failed",
                       "skipped", "pending"]


class RolloutPlan(Frozen):
    id: str
    created_at: str
    app: str
    recipe: str
    fleet: str
    devices: tuple[FleetDevice, ...]
    waves: tuple[tuple[str, ...], ...]          # device names per wave
    policy: RolloutPolicy
    hooks: Hooks
    bundles: dict[str, str]                      # target → bundle directory (rollout's copy)
    releases: dict[str, str]                     # target → release id
    keep: int = 3
    cpu_fallback: bool = False                   # NPU targets: their IREE CPU module
    # a device already running the release is deployed and validated again, not only checked
    revalidate: bool = False
    # a build older than a device's newest activated release is deployed (journaled there)
    allow_downgrade: bool = False
    _by_name: dict[str, FleetDevice] | None = pydantic.PrivateAttr(default=None)

    def device(self, name: str) -> FleetDevice:
        """By name, in constant time (a rollout looks every device up several times)."""
        if self._by_name is None:
            self._by_name = {d.name: d for d in self.devices}
        return self._by_name[name]


class DeviceOutcome(Frozen):
    device: str
    address: str
    target: str
    wave: int                                    # 1-based
    status: DeviceStatus
    reason: str = ""
    failure: str = ""                            # error class: DeviceUnreachable, …
    release: str = ""
    previous: str | None = None
    p90_before_ms: float | None = None
    p90_after_ms: float | None = None
    # the latency gate's decision figure: the median of the per-round p90 ratios (new / the
    # replaced release), their range over the rounds (its noise), and the limit it had
    p90_ratio: float | None = None
    p90_ratio_range: tuple[float, float] | None = None
    p90_ratio_limit: float | None = None
    seconds: float = 0.0
    # the dataset gate's score of the release on this device, where the gate ran (the canary
    # wave, or every wave with `everywhere`)
    dataset: DatasetScore | None = None


class WaveSummary(Frozen):
    index: int                                   # 1-based
    devices: tuple[str, ...]
    updated: int
    unchanged: int
    failed: int
    allowed_failures: str
    halted: bool
    complete: bool                               # False: interrupted or still running
    seconds: float


class FleetResult(Frozen):
    id: str
    app: str
    status: Literal["completed", "halted", "interrupted", "running"]
    halt_reason: str = ""
    rolled_back: Literal["none", "wave", "all"] = "none"
    releases: dict[str, str]
    waves: tuple[WaveSummary, ...]
    devices: tuple[DeviceOutcome, ...]
    seconds: float
    journal: str

    def release_scores(self) -> dict[str, list[DatasetScore]]:
        """Each release's dataset scores over the devices that ran the gate."""
        scores: dict[str, list[DatasetScore]] = {}
        for d in self.devices:
            if d.dataset is not None:
                scores.setdefault(d.release, []).append(d.dataset)
        return scores


class LastValidation(Frozen):
    """The newest on-device validation of an app, from the device's own journal."""

    release: str
    ok: bool
    at: str                           # ISO time, UTC
    dataset: str | None = None        # the dataset gate's score: "top1 0.9800 (ref 0.9800)"


class FleetDeviceStatus(Frozen):
    """One row of `edgekit fleet status`: what a device runs now, read from the device."""

    device: str
    address: str
    target: str
    groups: tuple[str, ...] = ()
    labels: dict[str, str] = {}
    reachable: bool = False
    current: str | None = None
    built_for: str | None = None      # the target profile the current release was built for
    runtime: str | None = None
    last_validation: LastValidation | None = None
    error: str = ""                   # why the device could not be read
