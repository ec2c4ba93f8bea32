"""`edgekit fleet update --dry-run`: what an update would do to each device, wave by wave,
without building, uploading or switching anything. Each device is read the way the rollout's
own deploy reads it (live-release check, then the deploy's preflight and upload plan)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.fleet import FleetDevice, RolloutPolicy
from edgekit.config.profiles import load_target
from edgekit.device import layout
from edgekit.device.deploy import (DeployPlan, DeployPolicy, expected_sums, plan_deploy,
                                   preflight_target, release_id)
from edgekit.device.provision import shim_version
from edgekit.device.releases import live_release
from edgekit.errors import EdgekitError
from edgekit.fleet.rollout import SHARED_CPUS_NOTE, UpdateOptions, merged_hooks, update_inputs
from edgekit.fleet.waves import plan_waves
from edgekit.toolchain.verified import VerifiedBundle
from edgekit.transport import open_device


@dataclass(frozen=True)
class TargetBuild:
    """What the update would build for one target profile."""

    target: str
    cached: bool                    # the cache has it: its release is known
    note: str
    release: str | None = None


@dataclass(frozen=True)
class DeviceDryRun:
    device: str
    target: str
    wave: int
    action: str                     # deploy | unchanged | fails | after the build
    reason: str = ""
    plan: DeployPlan | None = None


@dataclass(frozen=True)
class FleetDryRun:
    app: str
    builds: tuple[TargetBuild, ...]
    waves: tuple[tuple[str, ...], ...]
    devices: tuple[DeviceDryRun, ...]


# target profile → (what building it would do, the cached bundle when there is one)
PlanBuild = Callable[[str], tuple[str, VerifiedBundle | None]]


def plan_update(options: UpdateOptions, plan_build: PlanBuild) -> FleetDryRun:
    """Every device's part of `fleet update` with these options, in its wave."""
    fleet, recipe, policy = update_inputs(options)
    waves = plan_waves(fleet.devices, lambda d: d.target, policy.canary, policy.waves)
    builds, bundles = [], {}
    for target in dict.fromkeys(d.target for d in fleet.devices):
        note, bundle = plan_build(target)
        bundles[target] = bundle
        builds.append(TargetBuild(target, bundle is not None, note,
                                  release_id(bundle) if bundle else None))
    deploy_policy = DeployPolicy(keep=options.keep, hooks=merged_hooks(recipe, fleet),
                                 hooks_when_current=True, cpu_fallback=options.cpu_fallback,
                                 allow_downgrade=options.allow_downgrade)
    jobs = [(device, index) for index, wave in enumerate(waves, 1) for device in wave]

    def one(job: tuple[FleetDevice, int]) -> DeviceDryRun:
        device, wave = job
        return _device(device, wave, bundles[device.target], deploy_policy, policy,
                       options.revalidate)
    with ThreadPoolExecutor(max_workers=policy.concurrency,
                            thread_name_prefix="dry-run") as pool:
        devices = tuple(pool.map(one, jobs))
    return FleetDryRun(app=recipe.name, builds=tuple(builds),
                       waves=tuple(tuple(d.name for d in wave) for wave in waves),
                       devices=devices)


def _device(device: FleetDevice, wave: int, bundle: VerifiedBundle | None,
            policy: DeployPolicy, rollout: RolloutPolicy, revalidate: bool) -> DeviceDryRun:
    def result(action: str, reason: str = "", plan: DeployPlan | None = None) -> DeviceDryRun:
        return DeviceDryRun(device.name, device.target, wave, action, reason, plan)
    try:
        identity = Path(device.identity) if device.identity else None
        with open_device(device.address, identity) as conn:
            if bundle is None:
                preflight_target(conn, load_target(device.target), policy.cpu_fallback)
                return result("after the build", "it can run the target; the upload is known "
                                                  "once the build is made")
            release = release_id(bundle)
            live = live_release(conn, bundle.manifest.app, release,
                                layout.shims_dir(shim_version()), expected_sums(bundle))
            if live.verified and not revalidate:
                return result("unchanged", "already current: its files verify on the device")
            plan = plan_deploy(conn, bundle, policy)
        gated = rollout.max_p90_ratio and plan.previous and plan.activate
        note = (SHARED_CPUS_NOTE if gated and device.lab and not rollout.gate_shared_cpus
                else "latency gate before activation" if gated else "")
        return result("deploy", note, plan)
    except EdgekitError as exc:
        where = f" ({exc.where})" if exc.where and exc.where not in exc.what else ""
        return result("fails", f"{type(exc).__name__}: {exc.what}{where}")


__all__ = ["DeviceDryRun", "FleetDryRun", "TargetBuild", "plan_update"]
