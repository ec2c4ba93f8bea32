"""`--dry-run` of `deploy`, `rollback` and `fleet update`: what would be built (a cache hit or
not), uploaded (which files, how many bytes: files the device has already are copied there,
not sent), activated, per device — reading the devices, changing nothing on any of them.

Nothing is built: a recipe's bundle is known when the build cache has it (found from the
model's sources, as `edgekit build` finds a hit without loading the model); otherwise the
device's preflight for the target runs and the upload is known after the build.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.api.build import recorded_steering
from edgekit.api.deploy import DeployOptions, check_options, deploy_timeouts, policy_of
from edgekit.config.address import safe_name
from edgekit.config.profiles import load_target
from edgekit.device import layout
from edgekit.device.deploy import DeployPlan, plan_deploy, preflight_target
from edgekit.device.probe import probe
from edgekit.device.provision import needs_provisioning, shim_version
from edgekit.device.releases import rollback_target
from edgekit.fleet.dry_run import FleetDryRun, plan_update
from edgekit.fleet.rollout import UpdateOptions
from edgekit.models.bundle import Bundle
from edgekit.pipeline import source_key
from edgekit.pipeline.build_types import BuildOptions
from edgekit.pipeline.cache import BuildCache
from edgekit.pipeline.hit import cache_slot, tuned_manifest
from edgekit.toolchain.signing import own_principal
from edgekit.toolchain.verified import VerifiedBundle, open_verified, signed_by_us
from edgekit.transport import open_device


@dataclass(frozen=True)
class DeployDryRun:
    build: str                      # what would be built: "prebuilt …", "cache hit …", "build …"
    device: str
    plan: DeployPlan | None         # None: known after the build (the device passed preflight)


@dataclass(frozen=True)
class RollbackDryRun:
    device: str
    app: str
    current: str | None
    to: str
    verifies: bool | None           # the release's files verify on the device (None: no shims)
    problem: str                    # why it does not verify
    provision: bool                 # the runtime or shims would be installed first


def planned_build(recipe: Path, target: str, use_cache: bool = True,
                  trust_pickle: bool = False) -> tuple[str, VerifiedBundle | None]:
    """What building `recipe` for `target` would do, without building: (note, the cached
    bundle as it would be published) or (note, None) when it would be built."""
    if not use_cache:
        return "would build (--no-cache)", None
    options = BuildOptions(recipe=recipe, target=target, use_cache=True,
                           trust_pickle=trust_pickle, steer=recorded_steering)
    loaded, profile = source_key.loaded_recipe(options), load_target(target)
    skey = source_key.source_key(options, loaded, profile)
    record = source_key.load_record(skey) if skey else None
    if record is None or not record.still_holds():
        return ("would build: no cached build of the recipe's current sources (the cache "
                "may still hold it under its full key, found once the model is loaded)"), None
    cache = BuildCache()
    entry = cache.lookup(cache_slot(cache, record.key))
    if entry is None:
        return "would build: the cached build was removed", None
    bundle = open_verified(entry)            # read where it is: nothing is copied
    changed = tuned_manifest(bundle.manifest, record.tuning)
    if changed is not None:                  # the tuning note is recorded when published
        bundle = signed_by_us(Bundle(entry, changed), own_principal())
    return f"cache hit (build {record.key[:12]}…): nothing is compiled", bundle


def deploy_dry_run(options: DeployOptions) -> DeployDryRun:
    """What `deploy(options)` would do, read from the device; the same refusals as a deploy
    (an unreachable device, a target it cannot run, an untrusted bundle, a downgrade)."""
    check_options(options)
    if options.bundle is not None:
        note, bundle = f"nothing to build: the bundle {options.bundle}", \
            open_verified(options.bundle, options.allow_unsigned)
    else:
        note, bundle = planned_build(options.recipe, options.target, options.use_cache,
                                     options.trust_pickle)
    try:
        with open_device(options.host, options.identity, deploy_timeouts(options)) as conn:
            if bundle is None:
                preflight_target(conn, load_target(options.target), options.cpu_fallback)
                return DeployDryRun(note, conn.where, None)
            return DeployDryRun(note, conn.where, plan_deploy(
                conn, bundle, policy_of(options, bundle.manifest.hooks)))
    finally:
        if bundle is not None:
            bundle.release()                 # a .tar's extraction


def rollback_dry_run(host: str, app: str, to: str | None = None,
                     identity: Path | None = None) -> RollbackDryRun:
    """What `rollback` would switch, and whether the release it goes back to verifies."""
    safe_name(app, "app")
    if to:
        safe_name(to, "release")
    with open_device(host, identity) as conn:
        info = probe(conn)
        current, target = rollback_target(conn, app, to)
        shims = layout.shims_dir(shim_version())
        verifies, problem = None, "the device has no shims yet: checked when provisioned"
        if conn.listdir(shims) is not None:
            result = conn.run(["sh", f"{shims}/verify.sh", layout.release_dir(app, target)],
                              check=False)
            verifies = result.returncode == 0
            problem = "" if verifies else \
                (result.stderr or result.stdout).decode(errors="replace").strip()[:300]
        return RollbackDryRun(device=conn.where, app=app, current=current, to=target,
                              verifies=verifies, problem=problem,
                              provision=needs_provisioning(info))


def fleet_update_dry_run(options: UpdateOptions) -> FleetDryRun:
    """What `fleet update` would build per target and do to each device, wave by wave."""
    def plan_build(target: str) -> tuple[str, VerifiedBundle | None]:
        return planned_build(options.recipe, target, options.use_cache)
    return plan_update(options, plan_build)


__all__ = ["DeployDryRun", "RollbackDryRun", "deploy_dry_run", "fleet_update_dry_run",
           "planned_build", "rollback_dry_run"]
