"""Deploy a verified bundle in five named steps: preflight → stage (upload to staging, verify
on the device) → validate → activate → hooks, over one frozen DeployPolicy.

Order chosen so that a bad release never goes live: the new release is validated on the device
from its own directory *before* `current` is switched, so a failed validation leaves `current`
exactly as it was (nothing to roll back). The switch itself is the activate shim's rename(2).
`edgekit rollback` moves `current` back to the previously activated release.

Crash consistency: a release directory that `current` or the rollback target points at is
never removed or moved; an existing copy of the release being deployed is verified in place
(and, if corrupted, repaired file by file when it is live, or replaced by a fresh staging copy
when it is not). Whatever a killed deploy leaves (staging, validation scratch, a release never
activated) is removed by the next deploy of the app (`releases.clean_leftovers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from edgekit.config.address import safe_name
from edgekit.config.recipe import Hooks
from edgekit.config.profiles import Target
from edgekit.device import layout, preflight
from edgekit.device.accuracy import run_gates
from edgekit.device import npu_preflight as npu_probe
from edgekit.device.probe import DeviceInfo, probe
from edgekit.device.provision import needs_provisioning, provision, shim_version
from edgekit.device.releases import (activate, clean_leftovers, current_release, in_flight,
                                     is_older, journal_event, list_releases, newest_activated,
                                     protected_releases, prune_releases, record_newest,
                                     scratch_token, verify_release)
from edgekit.device.trust import install_signers
from edgekit.errors import (BundleError, CannotRunHere, ConfigError, DeviceIncompatible,
                            DeviceOutOfSpace, EdgekitError, HealthGateFailed, RemoteCommandFailed,
                            ValidationFailed)
from edgekit.models.bundle import (DISPATCH_CONFIGS, Bundle, MANIFEST, MODULE, NPU, SIGNATURE,
                                   VARIANTS, ModuleVariant, check_payload_name, sha256_file)
from edgekit.models.report import OutputComparison, ValidationReport
from edgekit.toolchain.iree import runtime_flags
from edgekit.toolchain.verified import VerifiedBundle, verify
from edgekit.transport.base import SPACE_HINT, Transport, out_of_space, space_left
from edgekit.validate.compare import compare_output, with_float32_ratios
from edgekit.validate.folded import refuse_disagreeing
from edgekit.validate.outputs import output_byte_cap, output_file, read_output
from edgekit.validate.tolerance import output_limits
from edgekit.validate.samples import worst_per_output


@dataclass(frozen=True)
class DeployResult:
    device: str
    app: str
    release: str
    previous: str | None
    activated: bool                 # False when the release was already current
    uploaded_files: int
    uploaded_bytes: int
    provisioned: bool
    report: ValidationReport
    pruned: tuple[str, ...]
    seconds: float
    stage_seconds: dict[str, float] = field(default_factory=dict)
    gate: dict = field(default_factory=dict)   # what the health gate measured, if any
    signer: str | None = None       # who signed the bundle (None: deployed --allow-unsigned)
    variant: str | None = None      # the CPU variant this device runs (None: the baseline)
    variants_skipped: tuple[str, ...] = ()  # variants passed over, and why
    npu: str | None = None          # an NPU release: what the NPU preflight found, or that
                                    # --cpu-fallback deployed the CPU module without it
    accuracy: dict = field(default_factory=dict)  # what the accuracy gates measured
    copied_on_device: int = 0       # files another release on the device had: copied there


def preflight_target(conn: Transport, target: Target, cpu_fallback: bool = False
                     ) -> DeviceInfo:
    """Before a build for `target`: the device answers, and can run `target`'s code (the same
    checks as a bundle's preflight, less the free space the build's size decides)."""
    info = probe(conn)
    refuse_if(preflight.target_problems(target, info), conn, info, target.backend,
              nothing_done="nothing was built or uploaded")
    npu_preflight(conn, target, cpu_fallback)
    return info


def npu_preflight(conn: Transport, target: Target, cpu_fallback: bool) -> str | None:
    """An NPU target's own preflight (device/npu_preflight.py): refuses (exit 14) a device
    without the NPU stack the profile names, unless `cpu_fallback`; returns what the deploy
    reports about the NPU (None: not an NPU target)."""
    npu = target.npu
    if npu is None:
        return None
    if target.backend == "none":
        raise DeviceIncompatible(f"target {target.name} has no CPU/GPU module to deploy (an "
                                 f"{npu.accelerator} artifact and estimates only)",
                                 where=conn.where, hint="nothing was uploaded")
    if cpu_fallback:
        return (f"--cpu-fallback: the {npu.accelerator} NPU part is not used; the IREE CPU "
                f"module ({MODULE}) runs and is validated")
    found = npu_probe.probe_npu(conn, npu)
    problems = npu_probe.npu_problems(npu, found)
    if problems:
        raise DeviceIncompatible("; ".join(problems), where=conn.where,
                                 hint=npu_probe.FALLBACK_HINT)
    return (f"{npu_probe.describe(npu, found)}; the NPU artifact is installed with the "
            "release, and validation ran the IREE CPU module (edgekit runs no NPU runtime on "
            "the device yet)")


def refuse_if(found: list[str], conn: Transport, info: DeviceInfo, backend: str,
              nothing_done: str) -> None:
    """A device that cannot run the code: one line with every problem, and the targets
    that fit it (of the same backend first) as the hint."""
    if found:
        fits = preflight.fitting_targets(info, backend=backend) or \
            preflight.fitting_targets(info)
        raise DeviceIncompatible("; ".join(found), where=conn.where,
                                 hint=f"{nothing_done}; targets that fit this device: "
                                      f"{', '.join(fits) or 'none known'}")


def release_id(bundle: Bundle) -> str:
    """Content-addressed over the whole manifest but its creation time: every file's sha256,
    the tolerances, hooks and runtime driver (a manifest that validates more loosely is
    another release), so the same bundle, run and checked the same way, is the same release
    on every device."""
    content = json.dumps(bundle.manifest.model_dump(mode="json", exclude={"created_at"}),
                         sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()[:16]


HOOK_GRACE_S = 30.0   # the host waits this much past a hook's timeout_s (the shim kills it)


# Runs after on-device validation and before activation; raises (HealthGateFailed) to keep the
# release from going live. Gets the connection, the device's info and the new release id;
# returns what it measured (kept in DeployResult.gate).
Gate = Callable[[Transport, DeviceInfo, str], dict]


def refuse_npu_only(target: str, backend: str) -> None:
    """A `backend: none` target (a microcontroller NPU) has nothing to run over SSH: its bundle
    holds the NPU compiler's artifact and estimates only."""
    if backend == "none":
        raise CannotRunHere(
            f"{target} bundles hold an NPU artifact and its estimates only (backend none): "
            "nothing runs over SSH", where=f"target {target}",
            hint="link npu/*.tflite into the microcontroller's firmware (Ethos-U driver), or "
                 "build for a Linux NPU board (e.g. imx93-npu)")


@dataclass(frozen=True)
class Fallback:
    """Where `current` goes when a hook fails: `release` (None: the app has no current
    release). A fleet rollout names the release the device ran before the rollout touched it."""

    release: str | None


@dataclass(frozen=True)
class DeployPolicy:
    """How a deploy may proceed, decided once by the caller (one frozen value instead of ten
    flags passed through every layer). Checked when made."""

    keep: int = 3                   # releases kept on the device (current included)
    allow_unsigned: bool = False    # the user's opt-out of the signature check (journaled)
    allow_downgrade: bool = False   # deploy a build older than the device's newest (journaled)
    cpu_fallback: bool = False      # an NPU bundle: its IREE CPU module, no NPU needed
    hooks: Hooks | None = None      # run after activation (the manifest's, or the fleet's)
    hooks_when_current: bool = False   # ... also when the release was current already
    fallback: Fallback | None = None   # a failed hook's restore (None: the previous current)
    gate: Gate | None = None        # after validation, before activation (fleet latency gate)
    dataset: bool = True            # run the bundle's dataset gate (a fleet: its first wave,
                                    # unless the bundle says `everywhere`)

    def __post_init__(self) -> None:
        if isinstance(self.keep, bool) or not isinstance(self.keep, int) or self.keep < 1:
            raise ConfigError(f"keep must be a whole number of releases >= 1 (got "
                              f"{self.keep!r})", key="keep",
                              hint="--keep N counts the current release too")


# The five steps of a deploy, in order. Only `preflight` runs in a dry run: it reads the device
# and decides; `stage` provisions and uploads; `validate` runs the samples on the device (and
# the gate); `activate` renames `current`; `hooks` runs the user's checks after it.
STEPS = ("preflight", "stage", "validate", "activate", "hooks")


@dataclass(frozen=True)
class Preflight:
    """What the preflight read from the device, and what the later steps will do."""

    info: DeviceInfo
    app: str
    release: str
    previous: str | None            # `current` before this deploy
    downgrade: bool                 # older than the newest activated (allowed by the policy)
    provision: bool                 # the runtime or the shims must be installed first
    runtime: str
    shims: str
    variant: ModuleVariant | None   # the CPU variant this device runs (None: the baseline)
    variants_skipped: tuple[str, ...]
    npu: str | None
    payload_bytes: int

    @property
    def module(self) -> str:
        return self.variant.file if self.variant else MODULE


class _Clock:
    """The deploy's stage marks (`on_stage` is told each one as it starts)."""

    def __init__(self, on_stage: Callable[[str], None] | None):
        self.started = time.perf_counter()
        self.marks: dict[str, float] = {}
        self.on_stage = on_stage

    def __call__(self, name: str) -> None:
        self.marks[name] = time.perf_counter()
        if self.on_stage:
            self.on_stage(name)

    def seconds(self) -> tuple[float, dict[str, float]]:
        now = time.perf_counter()
        marks = list(self.marks.items()) + [("end", now)]
        return round(now - self.started, 3), {
            name: round(marks[i + 1][1] - t, 3) for i, (name, t) in enumerate(marks[:-1])}


def deploy_verified(conn: Transport, bundle: VerifiedBundle, policy: DeployPolicy = DeployPolicy(),
                    on_stage: Callable[[str], None] | None = None) -> DeployResult:
    """Deploy a verified bundle on a connected device: the five STEPS (see the module
    docstring for why in this order). The bundle is neither parsed nor checked again here:
    its signature was checked when it was verified, and the device's verify.sh checks it
    again on the uploaded bytes. Releases are monotonic: a bundle built before the newest
    release that went live for the app on the device is refused (BundleError, before anything
    is uploaded) unless `policy.allow_downgrade` (journaled); `rollback` is not held to it."""
    clock = _Clock(on_stage)
    if not policy.allow_unsigned:
        bundle.require_signed()
    clock("preflight")
    pre = preflight_step(conn, bundle, policy)
    if bundle.manifest.variants:
        clock(f"preflight: runs {'variant ' + pre.variant.name if pre.variant else 'the baseline'}")
    with in_flight(conn, pre.app, pre.release):
        files, sent, copied = stage_step(conn, bundle, pre, clock)
        try:   # a release that does not go live here does not stay (unless protected)
            report, measured, accuracy = validate_step(conn, bundle, pre, policy, clock)
            activated = activate_step(conn, pre, clock)
        except BaseException:
            _discard_unless_protected(conn, pre.app, pre.release)
            raise
    hooks_step(conn, pre, policy, activated, clock)
    if activated:   # live and healthy: the newest release, if newer than the device's record
        record_newest(conn, pre.app, bundle.manifest.created_at, pre.release)
    pruned = prune_releases(conn, pre.app, policy.keep)
    seconds, stage_seconds = clock.seconds()
    return DeployResult(device=conn.where, app=pre.app, release=pre.release,
                        previous=pre.previous, activated=activated, uploaded_files=files,
                        uploaded_bytes=sent, copied_on_device=copied,
                        provisioned=pre.provision, report=report,
                        pruned=pruned, seconds=seconds, stage_seconds=stage_seconds,
                        gate=measured, signer=bundle.signer,
                        variant=pre.variant.name if pre.variant else None,
                        variants_skipped=pre.variants_skipped, npu=pre.npu, accuracy=accuracy)


def deploy_bundle(conn: Transport, bundle: Bundle, keep: int = 3,
                  on_stage: Callable[[str], None] | None = None, **policy) -> DeployResult:
    """`deploy_verified` for a bundle not verified yet (verified here, once); `policy`: the
    DeployPolicy fields. For callers that hold a Bundle; new code passes a DeployPolicy."""
    chosen = DeployPolicy(keep=keep, **policy)
    refuse_npu_only(bundle.manifest.target, bundle.manifest.backend)
    return deploy_verified(conn, verify(bundle, chosen.allow_unsigned), chosen, on_stage)


def preflight_step(conn: Transport, bundle: VerifiedBundle, policy: DeployPolicy) -> Preflight:
    """Read the device and decide: it can run the bundle (arch, features, runtime, space, the
    NPU), which module it runs, whether it needs provisioning, and that the release is no
    downgrade. Changes nothing on the device (a dry run is this step alone)."""
    m = bundle.manifest
    refuse_npu_only(m.target, m.backend)
    refuse_disagreeing(bundle)       # samples whose folded inputs differ: nothing uploaded
    app, release = safe_name(m.app, "app"), release_id(bundle)
    info = probe(conn)
    payload = sum(bundle.file(f).stat().st_size for f in m.files)
    refuse_if(preflight.problems(m, info), conn, info, m.backend,
              nothing_done="nothing was uploaded")
    if (full := preflight.space_problem(info, payload)) is not None:
        raise DeviceOutOfSpace(full, where=conn.where,
                               hint="nothing was uploaded; free space on the device (its "
                                    "~/.edgekit holds the releases: `deploy --keep` keeps "
                                    "fewer), then deploy again")
    npu = npu_preflight(conn, Target.model_validate(m.target_profile), policy.cpu_fallback)
    variant, skipped = preflight.pick_variant(m, info)
    previous = current_release(conn, app)
    newest = newest_activated(conn, app)
    downgrade = newest is not None and previous != release and newest[1] != release \
        and is_older(m.created_at, newest[0])
    if downgrade and not policy.allow_downgrade:
        raise BundleError(
            f"release {release} (built {m.created_at}) is older than {newest[1]} (built "
            f"{newest[0]}), the newest release of {app} activated on the device; refused, "
            "nothing was uploaded", where=conn.where,
            hint="deploy a newer build, `edgekit rollback` to go back to an earlier release, "
                 "or pass --allow-downgrade (recorded in the device's journal)")
    return Preflight(info=info, app=app, release=release, previous=previous,
                     downgrade=downgrade,
                     provision=needs_provisioning(info, m.compiler_version),
                     runtime=layout.runtime_dir(m.compiler_version, info.arch),
                     shims=layout.shims_dir(shim_version()), variant=variant,
                     variants_skipped=skipped, npu=npu, payload_bytes=payload)


def stage_step(conn: Transport, bundle: VerifiedBundle, pre: Preflight,
               clock: Callable[[str], None]) -> Sent:
    """Provision the device if it needs it, make room, install the trusted signers and put the
    release in place, verified on the device (upload_release)."""
    if pre.provision:
        clock("provision")
        provision(conn, pre.info, bundle.manifest.compiler_version)
    clock("upload")
    clean_leftovers(conn, pre.app, keep=pre.release)   # before the upload: a full disk gets
    install_signers(conn)                              # its space
    sent = upload_release(conn, bundle, pre.app, pre.release, pre.shims,
                          allow_unsigned=bundle.signer is None, module=pre.module)
    if bundle.signer is None:
        journal_event(conn, pre.app, "unsigned-allowed", pre.release)
    if pre.downgrade:
        journal_event(conn, pre.app, "downgrade-allowed", pre.release)
    return sent


def validate_step(conn: Transport, bundle: VerifiedBundle, pre: Preflight, policy: DeployPolicy,
                  clock: Callable[[str], None]) -> tuple[ValidationReport, dict, dict]:
    """Run every validation sample from the release's own directory and compare here; then
    the accuracy gates the bundle carries (validation.repeat, validation.dataset: accuracy.py)
    and the policy's gate. Returns (report, the gate's figures, the accuracy gates' figures);
    raises (ValidationFailed, HealthGateFailed) before anything is live."""
    clock("validate")
    report = validate_on_device(conn, bundle, layout.release_dir(pre.app, pre.release),
                                pre.runtime, pre.shims)
    if not report.ok:
        journal_event(conn, pre.app, "rejected", pre.release)
        kept = (f"`current` still points at {pre.previous}" if pre.previous
                else "the app has no current release")
        raise ValidationFailed(
            f"on-device validation failed on {conn.where}: release {pre.release} was not "
            f"activated; {kept}", report=report, hint=_mismatch_hint(bundle.manifest.backend,
                                                                     pre.info))
    accuracy = run_gates(conn, bundle, layout.release_dir(pre.app, pre.release), pre.runtime,
                         pre.shims, on_stage=clock, dataset=policy.dataset)
    journal_event(conn, pre.app, "validated", pre.release)
    if policy.gate is None:
        return report, {}, accuracy
    clock("gate")
    return report, policy.gate(conn, pre.info, pre.release), accuracy


def activate_step(conn: Transport, pre: Preflight, clock: Callable[[str], None]) -> bool:
    """Switch `current` to the release (one rename on the device); False when it was current
    already."""
    if pre.previous == pre.release:
        return False
    clock("activate")
    activate(conn, pre.app, pre.release, pre.shims)
    return True


def hooks_step(conn: Transport, pre: Preflight, policy: DeployPolicy, activated: bool,
               clock: Callable[[str], None]) -> None:
    """The policy's hooks after activation (also when already current, if it says so); a
    failure puts `current` back on the fallback and raises HealthGateFailed."""
    hooks = policy.hooks
    if hooks is None or not (hooks.after_activate or hooks.health) or \
            not (activated or policy.hooks_when_current):
        return
    clock("hooks")
    fallback = pre.previous if policy.fallback is None else policy.fallback.release
    run_hooks(conn, pre.app, pre.release, hooks, pre.shims, fallback=fallback)


@dataclass(frozen=True)
class DeployPlan:
    """What a deploy of a bundle would do on one device (a dry run: nothing was changed)."""

    device: str
    app: str
    release: str
    previous: str | None            # `current` now
    provision: bool                 # the runtime or shims would be installed first
    upload: UploadPlan
    activate: bool                  # `current` would move to the release
    samples: int                    # validation samples run on the device
    hooks: tuple[str, ...]          # the hooks that would run after activation
    gate: bool                      # the policy's gate would run before activation
    variant: str | None
    npu: str | None
    downgrade: bool                 # allowed by the policy (else preflight refused it)
    signer: str | None


def plan_deploy(conn: Transport, bundle: VerifiedBundle, policy: DeployPolicy = DeployPolicy()
                ) -> DeployPlan:
    """A dry run of deploy_verified: the preflight step (the same refusals, with the same
    errors), then what the later steps would move and switch. Reads the device only."""
    if not policy.allow_unsigned:
        bundle.require_signed()
    pre = preflight_step(conn, bundle, policy)
    shims = pre.shims if conn.listdir(pre.shims) is not None else None
    upload = plan_upload(conn, bundle, pre.app, pre.release, shims,
                         allow_unsigned=bundle.signer is None, module=pre.module)
    activates = pre.previous != pre.release
    hooks = policy.hooks
    runs_hooks = hooks is not None and (activates or policy.hooks_when_current)
    return DeployPlan(
        device=conn.where, app=pre.app, release=pre.release, previous=pre.previous,
        provision=pre.provision, upload=upload, activate=activates,
        samples=1 + len(bundle.manifest.more_golden),
        hooks=tuple(name for name in ("after_activate", "health")
                    if runs_hooks and getattr(hooks, name)),
        gate=policy.gate is not None, variant=pre.variant.name if pre.variant else None,
        npu=pre.npu, downgrade=pre.downgrade, signer=bundle.signer)


def run_hooks(conn: Transport, app: str, release: str, hooks: Hooks, shims: str,
              fallback: str | None) -> None:
    """The user's after-activation and health commands, with the release in the environment.
    A failure puts `current` back on `fallback` (none: no current release) and raises."""
    env = [f"EDGEKIT_APP={app}", f"EDGEKIT_RELEASE={release}",
           f"EDGEKIT_RELEASE_DIR={layout.release_dir(app, release)}"]
    for name, command in (("after_activate", hooks.after_activate), ("health", hooks.health)):
        if not command:
            continue
        # the hook shim keeps the deadline on the device and kills the hook's whole process
        # group past it (exit 124); the host's own deadline is a backstop for a stalled device
        try:
            result = conn.run(["env", *env, "sh", f"{shims}/hook.sh", f"{hooks.timeout_s:g}",
                               command], check=False, timeout=hooks.timeout_s + HOOK_GRACE_S)
            code, stderr = result.returncode, result.stderr
        except RemoteCommandFailed as exc:
            if exc.returncode != 124:
                raise
            code, stderr = 124, b""
        if code == 0:
            continue
        journal_event(conn, app, f"{name}-failed", release)
        restore_release(conn, app, fallback, shims)
        back = f"`current` is back on {fallback}" if fallback else "the app has no current " \
            "release again"
        if code == 124:
            failure = (f"did not finish within {hooks.timeout_s:g} s (timeout_s; its processes "
                       f"were killed)")
        else:
            tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
            failure = f"exited with {code} ({tail[0][:200]})"
        raise HealthGateFailed(f"the {name} hook {failure}; {back}", where=conn.where,
                               hint=f"run the hook by hand on the device: {command}")


def restore_release(conn: Transport, app: str, release: str | None, shims: str) -> None:
    """Make `release` current again (after re-checking its sha256), or leave the app with no
    current release (None)."""
    if release:
        verify_release(conn, app, release, shims)
        activate(conn, app, release, shims)
        journal_event(conn, app, "rollback", release)
    else:
        conn.run(["rm", "-f", "--", layout.current_link(app)], what="deactivating the release")
        journal_event(conn, app, "deactivate", "")


class Sent(NamedTuple):
    """What putting a release in place moved: files and bytes uploaded, and files copied on
    the device from another release instead of uploaded."""

    files: int
    bytes: int
    copied: int = 0


@dataclass(frozen=True)
class UploadPlan:
    """What the stage step moves to the device for a release (read before anything moves)."""

    present: bool                   # the release is there and verifies: nothing moves
    repair: bool                    # a corrupted copy that is live: repaired file by file
    exists: bool = False            # a copy of the release is there (corrupted, if not present)
    send: tuple[tuple[str, int], ...] = ()              # (file, bytes) uploaded
    reuse: tuple[tuple[str, int, str], ...] = ()        # (file, bytes, the device's copy)

    @property
    def send_bytes(self) -> int:
        return sum(size for _, size in self.send)


# other releases of the app whose SHA256SUMS are read for files the device has already
REUSE_FROM_RELEASES = 4
_SUM_LINE = re.compile(r"([0-9a-f]{64})  (\S+)")


def device_copies(conn: Transport, app: str, release: str,
                  wanted: dict[str, str]) -> dict[str, str]:
    """{file: path on the device of an identical file} for the payload files (`wanted`:
    {name: sha256}) that another release of the app holds, by its SHA256SUMS (newest
    releases first). The device's answer is untrusted and only a hint: names are checked,
    and the staging copy is verified by verify.sh like an upload."""
    found: dict[str, str] = {}
    others = [name for name, _ in list_releases(conn, app) if name != release]
    for other in others[:REUSE_FROM_RELEASES]:
        try:
            folder = layout.release_dir(app, safe_name(other, "release"))
        except ConfigError:
            continue
        try:
            sums = conn.read_text(f"{folder}/SHA256SUMS") or ""
        except EdgekitError:   # oversized, a link, unreadable: that release offers nothing
            continue
        have: dict[str, str] = {}
        for line in sums.splitlines():
            match = _SUM_LINE.fullmatch(line)
            if match and _is_payload_name(match.group(2)):
                have.setdefault(match.group(1), match.group(2))
        for rel, digest in wanted.items():
            if rel not in found and digest in have:
                found[rel] = f"{folder}/{have[digest]}"
        if len(found) == len(wanted):
            break
    return found


def _is_payload_name(name: str) -> bool:
    try:
        check_payload_name(name)
        return True
    except ValueError:
        return False


def plan_upload(conn: Transport, bundle: Bundle, app: str, release: str, shims: str | None,
                allow_unsigned: bool = False, module: str = MODULE) -> UploadPlan:
    """What upload_release would move, without changing anything on the device. `shims`:
    None when the device has none installed yet (no copy there can be verified)."""
    target = layout.release_dir(app, release)
    exists = conn.listdir(target) is not None
    if exists and shims is not None and conn.run(
            _verify_argv(shims, target, allow_unsigned), check=False).returncode == 0:
        return UploadPlan(present=True, repair=False, exists=True)
    m = bundle.manifest
    with tempfile.TemporaryDirectory(prefix="edgekit-release-") as tmp:
        extras = {p.name: p.stat().st_size for p in release_extras(bundle, Path(tmp), module)}
    sizes = {**{rel: bundle.file(rel).stat().st_size for rel in (*m.files, MANIFEST)}, **extras}
    repair = exists and release in protected_releases(conn, app)
    reuse = {} if repair else device_copies(conn, app, release, dict(m.files))
    return UploadPlan(present=False, repair=repair, exists=exists,
                      send=tuple((rel, size) for rel, size in sizes.items() if rel not in reuse),
                      reuse=tuple((rel, sizes[rel], path) for rel, path in sorted(reuse.items())))


def _verify_argv(shims: str, directory: str, allow_unsigned: bool) -> list[str]:
    return ["sh", f"{shims}/verify.sh", directory, *(["--allow-unsigned"] if allow_unsigned
                                                     else [])]


# copies files already on the device into the staging release: pairs of (from, to) arguments;
# a source that is not a plain file (a link, a device) is refused, never read
_COPY_PAIRS = ('while [ $# -gt 1 ]; do [ -f "$1" ] && [ ! -L "$1" ] || exit 1; '
               'cp -- "$1" "$2" || exit 1; shift 2; done')


def upload_release(conn: Transport, bundle: Bundle, app: str, release: str,
                   shims: str, allow_unsigned: bool = False,
                   module: str = MODULE) -> Sent:
    """Put the release in place, verified (signature, names, sha256s: verify.sh; without the
    signature if `allow_unsigned`). An identical release already there (it verifies) moves no
    payload; a payload file another release of the app holds with the same sha256 is copied
    on the device instead of uploaded (incremental: plan_upload says which). A corrupted copy
    that `current` or the rollback target points at is repaired in place, file by file (each
    file replaced by rename(2), so the directory is never missing); any other corrupted copy
    is moved aside only once a verified staging copy is ready to take its name."""
    target = layout.release_dir(app, release)

    def verify(directory: str) -> list[str]:
        return _verify_argv(shims, directory, allow_unsigned)

    plan = plan_upload(conn, bundle, app, release, shims, allow_unsigned, module)
    if plan.present:
        return Sent(0, 0)
    with tempfile.TemporaryDirectory(prefix="edgekit-release-") as tmp:
        extras = release_extras(bundle, Path(tmp), module)
        local_files = [(bundle.file(rel), rel) for rel in [*bundle.manifest.files, MANIFEST]]
        local_files += [(path, path.name) for path in extras]
        if plan.repair:
            return Sent(len(local_files), _repair_in_place(conn, target, local_files,
                                                           verify(target)))
        copies = {rel: path for rel, _, path in plan.reuse}
        staging, sent = _staged(conn, bundle, app, local_files, copies, verify)
        if staging is None:   # a copy on the device did not verify: upload every file
            staging, again = _staged(conn, bundle, app, local_files, {}, verify)
            sent = Sent(again.files, sent.bytes + again.bytes)
        try:
            conn.mkdirs(f"{layout.app_dir(app)}/releases")
            aside = None
            if plan.exists:  # corrupted and not live: out of the way, removed once replaced
                aside = layout.trash_dir(app, scratch_token())
                conn.rename(target, aside)
            try:
                conn.rename(staging, target)
            except RemoteCommandFailed:
                # a deploy of the same release at the same time renamed its copy first: the
                # release is in place if that copy verifies (ours is then removed below)
                if conn.run(verify(target), check=False).returncode != 0:
                    raise
                _remove_quietly(conn, staging)
        except BaseException:
            _remove_quietly(conn, staging)
            raise
        if aside:
            _remove_quietly(conn, aside)
    return sent


def _staged(conn: Transport, bundle: Bundle, app: str, local_files: list[tuple[Path, str]],
            copies: dict[str, str], verify: Callable[[str], list[str]]
            ) -> tuple[str | None, Sent]:
    """A staging copy of the release, verified on the device: `copies` copied there from the
    device's identical files, the rest uploaded. (staging, (files, bytes) sent); staging None
    (and removed) when it holds device copies and does not verify: the caller uploads all."""
    puts: list[tuple[Path, str]] = []
    staging = layout.staging_dir(app, scratch_token())
    try:
        conn.mkdirs(f"{staging}/golden")
        if bundle.manifest.variants:
            conn.mkdirs(f"{staging}/{VARIANTS}")
        if bundle.manifest.npu is not None:
            conn.mkdirs(f"{staging}/{NPU}")
        if bundle.manifest.dispatch_configs:
            conn.mkdirs(f"{staging}/{DISPATCH_CONFIGS}")
        copied = _copy_on_device(conn, staging, copies)
        puts = [(local, rel) for local, rel in local_files if rel not in copied]
        sent = sum(conn.put(local, f"{staging}/{rel}") for local, rel in puts)
        if copied and conn.run(verify(staging), check=False).returncode != 0:
            _remove_quietly(conn, staging)
            return None, Sent(len(puts), sent)
        if not copied:
            conn.run(verify(staging), what="the uploaded release does not verify on the device")
    except BaseException:
        _remove_quietly(conn, staging)
        raise
    return staging, Sent(len(puts), sent, len(copied))


def _copy_on_device(conn: Transport, staging: str, copies: dict[str, str]) -> set[str]:
    """Copy {file: the device's identical file} into `staging`, in one command; the files
    copied (none when the copy fails: another deploy pruned that release meanwhile, and the
    files are uploaded instead). verify.sh checks the copies like the uploads."""
    if not copies:
        return set()
    pairs = [arg for rel, path in copies.items() for arg in (path, f"{staging}/{rel}")]
    if conn.run(["sh", "-c", _COPY_PAIRS, "copy", *pairs], check=False).returncode != 0:
        return set()
    return set(copies)


def _repair_in_place(conn: Transport, target: str, local_files: list[tuple[Path, str]],
                     verify: list[str]) -> int:
    """Rewrite every file of a live release: each under a temporary name, then renamed over
    the old one; `verify` is verify.sh's command line for `target`. Returns the bytes sent."""
    conn.mkdirs(f"{target}/golden")
    if any(rel.startswith(f"{VARIANTS}/") for _, rel in local_files):
        conn.mkdirs(f"{target}/{VARIANTS}")
    if any(rel.startswith(f"{NPU}/") for _, rel in local_files):
        conn.mkdirs(f"{target}/{NPU}")
    if any(rel.startswith(f"{DISPATCH_CONFIGS}/") for _, rel in local_files):
        conn.mkdirs(f"{target}/{DISPATCH_CONFIGS}")
    sent = 0
    for local, rel in local_files:
        partial = f"{target}/{rel}.partial"
        try:
            sent += conn.put(local, partial)
            conn.rename(partial, f"{target}/{rel}")
        except BaseException:
            _remove_quietly(conn, partial)
            raise
    conn.run(verify, what="the repaired release does not verify on the device")
    return sent


def _remove_quietly(conn: Transport, path: str) -> None:
    """Best-effort clean-up on a failure path (the next deploy removes what remains)."""
    with contextlib.suppress(EdgekitError):
        conn.run(["rm", "-rf", "--", path], check=False)


def _discard_unless_protected(conn: Transport, app: str, release: str) -> None:
    """Remove a release that did not validate, unless `current` or the rollback target."""
    with contextlib.suppress(EdgekitError):
        if release not in protected_releases(conn, app):
            _remove_quietly(conn, layout.release_dir(app, release))


def expected_sums(bundle: Bundle) -> tuple[str, ...]:
    """The sha256 of the SHA256SUMS a deploy of `bundle` writes, one per module a device may
    run (the baseline, each variant): what a live copy of the release must hold."""
    digests = []
    with tempfile.TemporaryDirectory(prefix="edgekit-release-") as tmp:
        for module in (MODULE, *(v.file for v in bundle.manifest.variants)):
            folder = Path(tmp) / str(len(digests))
            folder.mkdir()
            extras = release_extras(bundle, folder, module)
            digests.append(sha256_file(next(p for p in extras if p.name == "SHA256SUMS")))
    return tuple(digests)


def release_extras(bundle: Bundle, tmp: Path, module: str = MODULE) -> list[Path]:
    """run.env (what the run/bench shims execute: `module`, the bundle's module this device
    runs), the manifest's signature (if any) and SHA256SUMS over every release file."""
    m = bundle.manifest
    if module != MODULE and module not in {v.file for v in m.variants}:
        raise DeviceIncompatible(f"unexpected module {module!r}")
    sets = [m.golden_inputs, *(s.inputs for s in m.more_golden)]
    for rel in (r for inputs in sets for r in inputs):  # shell word lists: plain names only
        folder, _, name = rel.partition("/")
        if folder != "golden":
            raise DeviceIncompatible(f"unexpected golden input path {rel!r}")
        safe_name(name, "golden input")
    run_env = tmp / "run.env"
    driver = safe_name(m.runtime_driver, "driver")
    # THREADS: local-task's worker count as tuned (run.sh, bench.sh); RUNTIME_FLAGS: the same
    # as iree-run-module flags, for an application that runs `current/` itself
    threads = f"THREADS={int(m.runtime_threads)}\n" if m.runtime_threads else ""
    flags = " ".join(runtime_flags(driver, m.runtime_threads))
    # INPUTS: the golden sample (what bench runs); INPUTS_<k>: validation sample k (run.sh K)
    run_env.write_text(f"MODULE={module}\n"
                       f"DRIVER={driver}\n" + threads +
                       f"RUNTIME_FLAGS='{flags}'\n"
                       f"FUNCTION={safe_name(m.entry_function, 'function')}\n"
                       f"INPUTS='{' '.join(m.golden_inputs)}'\n"
                       + "".join(f"INPUTS_{k}='{' '.join(inputs)}'\n"
                                 for k, inputs in enumerate(sets[1:], 1))
                       # FUNCTION_<k>: a sample that runs another function (an LLM's decode)
                       + "".join(f"FUNCTION_{k}={safe_name(s.function, 'function')}\n"
                                 for k, s in enumerate(m.more_golden, 1) if s.function)
                       + f"NOUTPUTS={len(m.outputs)}\n"
                       # the files run.sh writes (bfloat16/float8 as raw .bin: arrays.py)
                       + "OUTPUTS='" + " ".join(output_file(i, s.dtype)
                                                for i, s in enumerate(m.outputs)) + "'\n")
    signed = [bundle.file(SIGNATURE)] if bundle.file(SIGNATURE).is_file() else []
    sums = {**m.files, MANIFEST: sha256_file(bundle.file(MANIFEST)),
            "run.env": sha256_file(run_env), **{p.name: sha256_file(p) for p in signed}}
    checksums = tmp / "SHA256SUMS"
    checksums.write_text("".join(f"{digest}  {rel}\n" for rel, digest in sorted(sums.items())))
    return [run_env, *signed, checksums]


def validate_on_device(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                       shims: str, keep: dict[tuple[int, int], np.ndarray] | None = None
                       ) -> ValidationReport:
    """Run every validation sample with the device's runtime; compare the outputs here, on the
    host (one report: each output's worst sample). `keep`: receives the device's outputs,
    keyed (sample, output index), for callers that look further (`edgekit bisect`)."""
    m = bundle.manifest
    sets = [m.golden_outputs, *(s.outputs for s in m.more_golden)]
    # one local folder for every sample's downloads (a fleet validates thousands of devices;
    # a folder made and removed per sample was a third of a simulated device's system time)
    with tempfile.TemporaryDirectory(prefix="edgekit-outputs-") as scratch:
        return worst_per_output([_validate_sample(conn, bundle, release_dir, runtime, shims,
                                                  k, g, keep, Path(scratch))
                                 for k, g in enumerate(sets)])


def _validate_sample(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                     shims: str, sample: int, golden_outputs: tuple[str, ...],
                     keep: dict[tuple[int, int], np.ndarray] | None,
                     scratch: Path) -> ValidationReport:
    m = bundle.manifest
    out_dir = layout.validation_dir(m.app, scratch_token())
    started = time.perf_counter()
    try:
        result = conn.run(["sh", f"{shims}/run.sh", runtime, release_dir, out_dir,
                           str(sample)], check=False, timeout=600)
        seconds = time.perf_counter() - started
        full = out_of_space(space_left(conn, out_dir), 1) if result.returncode != 0 else None
        if full:   # the outputs had nowhere to go: not the model's fault, nothing to journal
            raise RemoteCommandFailed(
                f"validation could not write its outputs: {full}; the release was not "
                f"activated", where=conn.where, argv=["run.sh", out_dir],
                returncode=result.returncode, stderr_tail=result.stderr[-3000:].decode(
                    errors="replace"), hint=SPACE_HINT)
        comparisons = []
        for i, (sig, golden) in enumerate(zip(m.outputs, golden_outputs)):
            name = output_file(i, sig.dtype)
            local = scratch / f"s{sample}-{name}"
            expected = _golden(bundle.file(golden), sig.dtype, m.files.get(golden))
            if result.returncode != 0:
                comparisons.append(_run_failed(sig.name, expected, result.stderr))
                continue
            # the device is not trusted: no more than this output's data and a header
            conn.get(f"{out_dir}/{name}", local, max_bytes=output_byte_cap(expected.nbytes))
            try:
                # IREE's integers are signless: read as the manifest declares the output
                actual = read_output(local, sig.dtype, expected.shape)
            except (ValueError, EOFError, OSError) as exc:
                raise _unreadable_output(conn, m.app, name, exc) from None
            if keep is not None:
                keep[(sample, i)] = actual
            comparisons.append(compare_output(
                sig.name, actual, expected,
                output_limits(m.tolerances, sig.name, str(expected.dtype))))
    finally:
        _remove_quietly(conn, out_dir)
    return ValidationReport(app=m.app, target=m.target, where=conn.where,
                            ok=all(c.ok for c in comparisons),
                            outputs=with_float32_ratios(comparisons, m),
                            seconds=round(seconds, 4))


_goldens: dict[tuple[str, str, str], np.ndarray] = {}


def _golden(path: Path, dtype: str, recorded: str | None) -> np.ndarray:
    """A golden output, read once per content (a fleet validates the same goldens on every
    device); read-only, so no comparison can change the copy the next device gets. Its
    sha256 (from the digest cache) must still be the manifest's: the bundle was verified
    once, and a golden changed since then is refused, not compared against."""
    digest = sha256_file(path)
    if digest != recorded:
        raise BundleError(f"bundle file changed after it was verified: {path.name}",
                          where=str(path.parent), hint="rebuild or copy the bundle again")
    key = (str(path), digest, dtype)
    if key not in _goldens:
        if len(_goldens) > 256:
            _goldens.clear()
        array = read_output(path, dtype)
        array.setflags(write=False)
        _goldens[key] = array
    return _goldens[key]


def _unreadable_output(conn: Transport, app: str, name: str,
                       exc: Exception) -> RemoteCommandFailed:
    """An output the device wrote but that is no .npy (iree-run-module does not notice a
    failed write): say so, with the space left where it was written (a full disk, usually)."""
    df = conn.run(["df", "-Pk", layout.app_dir(app)], check=False)
    fields = (df.text.splitlines()[1:2] or [""])[0].split()
    free = f"{fields[3]} KiB free" if len(fields) > 3 else "free space unknown"
    return RemoteCommandFailed(
        f"validation output {name} came back unreadable ({str(exc) or type(exc).__name__}); "
        f"the device's disk has {free}; the release was not activated", where=conn.where,
        argv=["run.sh", name], returncode=1, stderr_tail="",
        hint="a full disk truncates outputs: free space on the device and deploy again")


def _run_failed(name: str, expected: np.ndarray, stderr: bytes):
    tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    return OutputComparison(name=name, shape=tuple(expected.shape), dtype=str(expected.dtype),
                            max_abs_error=float("inf"), max_rel_error=float("inf"), ok=False,
                            problems=(f"iree-run-module failed on the device: {tail[0]}",))


def _mismatch_hint(backend: str, info: DeviceInfo) -> str:
    if backend == "vulkan-spirv":
        fits = preflight.fitting_targets(info, backend="vulkan-spirv")
        return (f"the device's Vulkan device ({', '.join(info.vulkan_devices)}) computes this "
                f"module wrongly; build for a target that fits it: {', '.join(fits)}")
    return "compare the report with `edgekit validate --local` on the host to tell a device " \
           "problem from a compiler one"
