"""`edgekit deploy`: a prebuilt bundle (directory or .tar), or a recipe built for a target
first, shipped to one device through the device layer's checked order."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.address import local_root
from edgekit.config.devices import resolve_device
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.config.timeouts import Timeouts, resolve_timeouts
from edgekit.config.recipe import Hooks
from edgekit.device.deploy import (DeployPolicy, DeployResult, deploy_verified, preflight_target,
                                   refuse_npu_only)
from edgekit.errors import BundleError, ConfigError
from edgekit.models.bundle import require_bundle_path
from edgekit.pipeline.publish import private_copy
from edgekit.toolchain.verified import VerifiedBundle, open_verified, verify
from edgekit.transport import open_device


@dataclass(frozen=True)
class DeployOptions:
    host: str                       # registered device name, user@host[:port] or local:DIR
    bundle: Path | None = None      # a built bundle directory or .tar: no recipe, no compiler
    recipe: Path | None = None      # or build this recipe for `target` first
    target: str | None = None
    identity: Path | None = None
    keep: int = 3                   # releases kept on the device (current included)
    use_cache: bool = True
    allow_unsigned: bool = False    # the user's opt-out of the signature check (journaled)
    timeouts: Timeouts | None = None   # default: the target profile's, the recipe's, then env
    trust_pickle: bool = False      # the recipe's .pt2 may be unpickled (`--trust-pickle`)
    cpu_fallback: bool = False      # an NPU bundle: deploy its IREE CPU module, no NPU needed
    allow_downgrade: bool = False   # deploy a build older than the device's newest (journaled)


def deploy(options: DeployOptions, on_stage: Callable[[str], None] | None = None) -> DeployResult:
    """Ship a bundle to the device, validate it there, then activate it. The recipe's hooks
    (recorded in the bundle's manifest) run after activation."""
    check_options(options)
    bundle = None
    if options.bundle is not None:
        bundle = _open_private(Path(options.bundle), options.allow_unsigned)
    try:
        if bundle is not None:
            refuse_npu_only(bundle.manifest.target, bundle.manifest.backend)
        else:
            refuse_npu_only(options.target, load_target(options.target).backend)
        if local_root(options.host) is None:
            resolve_device(options.host, options.identity)   # a bad name or key: before a build
        timeouts = deploy_timeouts(options)
        if bundle is None:
            # reach the device and check it can run the target before a build of minutes: an
            # unreachable host, a refused key or a wrong target is known in seconds
            if on_stage:
                on_stage("connect and preflight")
            with open_device(options.host, options.identity, timeouts) as conn:
                preflight_target(conn, load_target(options.target), options.cpu_fallback)
            # imported here: a prebuilt bundle deploys without torch or the compiler installed
            from edgekit.api.build import BuildOptions, build
            if on_stage:
                on_stage("build")
            bundle = build(BuildOptions(recipe=options.recipe, target=options.target,
                                        use_cache=options.use_cache, private=True,
                                        trust_pickle=options.trust_pickle)).bundle
        with open_device(options.host, options.identity, timeouts) as conn:
            return deploy_verified(conn, verify(bundle, options.allow_unsigned),
                                   policy_of(options, bundle.manifest.hooks), on_stage)
    finally:
        if bundle is not None:
            bundle.release()                        # a .tar's extraction
            if options.bundle is None or Path(options.bundle).is_dir():
                shutil.rmtree(bundle.path.parent, ignore_errors=True)


def check_options(options: DeployOptions) -> None:
    """A bundle or a recipe with a target, and a bundle path that exists: before any device
    is named."""
    if (options.bundle is None) == (options.recipe is None):
        raise ConfigError("give a bundle, or a recipe with --target (not both)", key="deploy",
                          hint="edgekit deploy build/kws-mlp-rpi4 --host H, or "
                               "edgekit deploy --recipe R --target T --host H")
    if options.recipe is not None and not options.target:
        raise ConfigError("--recipe needs --target (the profile to build for)", key="target",
                          hint="edgekit targets list")
    if options.bundle is not None:
        require_bundle_path(Path(options.bundle))


def policy_of(options: DeployOptions, hooks: Hooks | None) -> DeployPolicy:
    """The device layer's policy for this deploy (the bundle's recorded hooks run)."""
    return DeployPolicy(keep=options.keep, allow_unsigned=options.allow_unsigned,
                        allow_downgrade=options.allow_downgrade,
                        cpu_fallback=options.cpu_fallback, hooks=hooks)


def _open_private(path: Path, allow_unsigned: bool) -> VerifiedBundle:
    """The bundle this deploy ships, opened and verified once, before any device is reached:
    a directory is copied whole first (another build or deploy from this working directory
    may publish build/<app>-<target> again while this one uploads: publish.py); a .tar is
    extracted to a directory the bundle owns. Errors name the user's path, not the copy's."""
    if not path.is_dir():
        return open_verified(path, allow_unsigned)
    copy = private_copy(path)
    try:
        return open_verified(copy, allow_unsigned)
    except BundleError as exc:
        shutil.rmtree(copy.parent, ignore_errors=True)
        raise type(exc)(exc.what, where=(exc.where or "").replace(str(copy), str(path)),
                        hint=exc.hint) from None
    except BaseException:
        shutil.rmtree(copy.parent, ignore_errors=True)
        raise


def deploy_timeouts(options: DeployOptions) -> Timeouts:
    """The deadlines for this deploy: given, or the target profile's `timeouts:` under the
    recipe's, under the EDGEKIT_TIMEOUT_* environment variables."""
    if options.timeouts is not None:
        return options.timeouts
    profile = load_target(options.target).timeouts if options.target else None
    recipe = load_recipe(options.recipe).timeouts if options.recipe else None
    return resolve_timeouts(profile, recipe)


__all__ = ["DeployOptions", "DeployResult", "check_options", "deploy", "deploy_timeouts",
           "policy_of"]
