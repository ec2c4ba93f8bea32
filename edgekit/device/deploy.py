"""Deploy a built bundle: preflight → upload to staging → verify → validate → activate.

Order chosen so that a bad release never goes live: the new release is validated on the device
from its own directory *before* `current` is switched, so a failed validation leaves `current`
exactly as it was (nothing to roll back). The switch itself is the activate shim's rename(2).
`edgekit rollback` moves `current` back to the previously activated release.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.config.address import safe_name
from edgekit.config.recipe import Hooks
from edgekit.device import layout, preflight
from edgekit.device.probe import DeviceInfo, probe
from edgekit.device.provision import needs_provisioning, provision, shim_version
from edgekit.device.releases import activate, current_release, journal_event, prune_releases
from edgekit.device.trust import check_signature, install_signers
from edgekit.errors import DeviceIncompatible, HealthGateFailed, ValidationFailed
from edgekit.models.bundle import Bundle, MANIFEST, SIGNATURE, sha256_file
from edgekit.models.report import OutputComparison, ValidationReport
from edgekit.transport.base import Transport
from edgekit.validate.compare import compare_output


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


def release_id(bundle: Bundle) -> str:
    """Content-addressed over the whole manifest but its creation time: every file's sha256,
    the tolerances, hooks and runtime driver (a manifest that validates more loosely is
    another release), so the same bundle, run and checked the same way, is the same release
    on every device."""
    content = json.dumps(bundle.manifest.model_dump(mode="json", exclude={"created_at"}),
                         sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()[:16]


# Runs after on-device validation and before activation; raises (HealthGateFailed) to keep the
# release from going live. Gets the connection, the device's info and the new release id;
# returns what it measured (kept in DeployResult.gate).
Gate = Callable[[Transport, DeviceInfo, str], dict]


def deploy_bundle(conn: Transport, bundle: Bundle, keep: int = 3,
                  on_stage: Callable[[str], None] | None = None, *, gate: Gate | None = None,
                  hooks: Hooks | None = None, hooks_when_current: bool = False,
                  fallback: str | None | bool = False,
                  allow_unsigned: bool = False) -> DeployResult:
    """Deploy a built bundle on a connected device (see the module docstring for the order).
    Its signature is checked here and again on the device; `allow_unsigned` (the user's
    explicit opt-out, journaled on the device) deploys a bundle whose signature is missing
    or not trusted. `hooks` run after activation (also when the release was already current
    if `hooks_when_current`); if one fails, `current` goes back to `fallback` (default: the
    release that was current before) and HealthGateFailed is raised."""
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def stage(name: str) -> None:
        timings[name] = time.perf_counter()
        if on_stage:
            on_stage(name)

    bundle.verify()
    signer = check_signature(bundle, allow_unsigned)
    m = bundle.manifest
    app, release = safe_name(m.app, "app"), release_id(bundle)
    stage("preflight")
    info = probe(conn)
    payload = sum(bundle.file(f).stat().st_size for f in m.files)
    found = preflight.problems(m, info, payload)
    if found:
        fits = preflight.fitting_targets(info, backend=m.backend) or \
            preflight.fitting_targets(info)
        raise DeviceIncompatible("; ".join(found), where=conn.where,
                                 hint=f"nothing was uploaded; targets that fit this device: "
                                      f"{', '.join(fits) or 'none known'}")
    provisioned = needs_provisioning(info, m.compiler_version)
    if provisioned:
        stage("provision")
        provision(conn, info, m.compiler_version)
    runtime = layout.runtime_dir(m.compiler_version, info.arch)
    shims = layout.shims_dir(shim_version())
    previous = current_release(conn, app)

    install_signers(conn)

    stage("upload")
    files, sent = upload_release(conn, bundle, app, release, shims,
                                 allow_unsigned=signer is None)
    if signer is None:
        journal_event(conn, app, "unsigned-allowed", release)

    stage("validate")
    report = validate_on_device(conn, bundle, layout.release_dir(app, release), runtime, shims)
    if not report.ok:
        journal_event(conn, app, "rejected", release)
        if previous != release:
            conn.run(["rm", "-rf", "--", layout.release_dir(app, release)])
        kept = (f"`current` still points at {previous}" if previous
                else "the app has no current release")
        raise ValidationFailed(
            f"on-device validation failed on {conn.where}: release {release} was not "
            f"activated; {kept}", report=report,
            hint=_mismatch_hint(m.backend, info))

    journal_event(conn, app, "validated", release)
    measured: dict = {}
    if gate is not None:
        stage("gate")
        measured = gate(conn, info, release)

    activated = previous != release
    if activated:
        stage("activate")
        activate(conn, app, release, shims)
    if hooks is not None and (hooks.after_activate or hooks.health) and \
            (activated or hooks_when_current):
        stage("hooks")
        run_hooks(conn, app, release, hooks, shims,
                  fallback=previous if fallback is False else fallback)
    pruned = prune_releases(conn, app, keep)
    now = time.perf_counter()
    marks = list(timings.items()) + [("end", now)]
    stage_seconds = {name: round(marks[i + 1][1] - t, 3) for i, (name, t) in enumerate(marks[:-1])}
    return DeployResult(device=conn.where, app=app, release=release, previous=previous,
                        activated=activated, uploaded_files=files, uploaded_bytes=sent,
                        provisioned=provisioned, report=report, pruned=pruned,
                        seconds=round(now - started, 3), stage_seconds=stage_seconds,
                        gate=measured, signer=signer)


def run_hooks(conn: Transport, app: str, release: str, hooks: Hooks, shims: str,
              fallback: str | None) -> None:
    """The user's after-activation and health commands, with the release in the environment.
    A failure puts `current` back on `fallback` (none: no current release) and raises."""
    env = [f"EDGEKIT_APP={app}", f"EDGEKIT_RELEASE={release}",
           f"EDGEKIT_RELEASE_DIR={layout.release_dir(app, release)}"]
    for name, command in (("after_activate", hooks.after_activate), ("health", hooks.health)):
        if not command:
            continue
        result = conn.run(["env", *env, "sh", "-c", command], check=False,
                          timeout=hooks.timeout_s)
        if result.returncode == 0:
            continue
        restore_release(conn, app, fallback, shims)
        journal_event(conn, app, f"{name}-failed", release)
        tail = result.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
        back = f"`current` is back on {fallback}" if fallback else "the app has no current " \
            "release again"
        raise HealthGateFailed(f"the {name} hook exited with {result.returncode} "
                               f"({tail[0][:200]}); {back}", where=conn.where,
                               hint=f"run the hook by hand on the device: {command}")


def restore_release(conn: Transport, app: str, release: str | None, shims: str) -> None:
    """Make `release` current again, or leave the app with no current release (None)."""
    if release:
        activate(conn, app, release, shims)
        journal_event(conn, app, "rollback", release)
    else:
        conn.run(["rm", "-f", "--", layout.current_link(app)], what="deactivating the release")
        journal_event(conn, app, "deactivate", "")


def upload_release(conn: Transport, bundle: Bundle, app: str, release: str,
                   shims: str, allow_unsigned: bool = False) -> tuple[int, int]:
    """Put the release in place, verified (signature, names, sha256s: verify.sh; without the
    signature if `allow_unsigned`). An identical release already there (it verifies) moves
    no payload. Returns (files, bytes) sent."""
    target = layout.release_dir(app, release)
    verify = ["sh", f"{shims}/verify.sh"]
    unsigned = ["--allow-unsigned"] if allow_unsigned else []
    if conn.run([*verify, target, *unsigned], check=False).returncode == 0:
        return 0, 0
    with tempfile.TemporaryDirectory(prefix="edgekit-release-") as tmp:
        extras = release_extras(bundle, Path(tmp))
        staging = layout.staging_dir(app, secrets.token_hex(6))
        conn.mkdirs(f"{staging}/golden")
        sent = 0
        local_files = [(bundle.file(rel), rel) for rel in [*bundle.manifest.files, MANIFEST]]
        local_files += [(path, path.name) for path in extras]
        for local, rel in local_files:
            sent += conn.put(local, f"{staging}/{rel}")
        conn.run([*verify, staging, *unsigned],
                 what="the uploaded release does not verify on the device")
        conn.run(["rm", "-rf", "--", target])  # an incomplete or corrupted earlier copy
        conn.mkdirs(f"{layout.app_dir(app)}/releases")
        conn.rename(staging, target)
    return len(local_files), sent


def release_extras(bundle: Bundle, tmp: Path) -> list[Path]:
    """run.env (what the run/bench shims execute), the manifest's signature (if any) and
    SHA256SUMS over every release file."""
    m = bundle.manifest
    for rel in m.golden_inputs:  # they end up in a shell word list: plain names only
        folder, _, name = rel.partition("/")
        if folder != "golden":
            raise DeviceIncompatible(f"unexpected golden input path {rel!r}")
        safe_name(name, "golden input")
    run_env = tmp / "run.env"
    run_env.write_text(f"DRIVER={safe_name(m.runtime_driver, 'driver')}\n"
                       f"FUNCTION={safe_name(m.entry_function, 'function')}\n"
                       f"INPUTS='{' '.join(m.golden_inputs)}'\n"
                       f"NOUTPUTS={len(m.outputs)}\n")
    signed = [bundle.file(SIGNATURE)] if bundle.file(SIGNATURE).is_file() else []
    sums = {**m.files, MANIFEST: sha256_file(bundle.file(MANIFEST)),
            "run.env": sha256_file(run_env), **{p.name: sha256_file(p) for p in signed}}
    checksums = tmp / "SHA256SUMS"
    checksums.write_text("".join(f"{digest}  {rel}\n" for rel, digest in sorted(sums.items())))
    return [run_env, *signed, checksums]


def validate_on_device(conn: Transport, bundle: Bundle, release_dir: str, runtime: str,
                       shims: str) -> ValidationReport:
    """Run the golden inputs with the device's runtime; compare the outputs here, on the host."""
    m = bundle.manifest
    out_dir = f"{layout.app_dir(m.app)}/.validation-{secrets.token_hex(6)}"
    started = time.perf_counter()
    try:
        result = conn.run(["sh", f"{shims}/run.sh", runtime, release_dir, out_dir],
                          check=False, timeout=600)
        seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory(prefix="edgekit-outputs-") as tmp:
            comparisons = []
            for i, (sig, golden) in enumerate(zip(m.outputs, m.golden_outputs)):
                local = Path(tmp) / f"output_{i}.npy"
                expected = np.load(bundle.file(golden), allow_pickle=False)
                if result.returncode != 0:
                    comparisons.append(_run_failed(sig.name, expected, result.stderr))
                    continue
                conn.get(f"{out_dir}/output_{i}.npy", local)
                comparisons.append(compare_output(sig.name, np.load(local, allow_pickle=False),
                                                  expected, m.tolerances.for_output(sig.name)))
    finally:
        conn.run(["rm", "-rf", "--", out_dir], check=False)
    return ValidationReport(app=m.app, target=m.target, where=conn.where,
                            ok=all(c.ok for c in comparisons), outputs=tuple(comparisons),
                            seconds=round(seconds, 4))


def _run_failed(name: str, expected: np.ndarray, stderr: bytes):
    tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
    return OutputComparison(name=name, shape=tuple(expected.shape), max_abs_error=float("inf"),
                            max_rel_error=float("inf"), cosine=float("nan"), ok=False,
                            problems=(f"iree-run-module failed on the device: {tail[0]}",))


def _mismatch_hint(backend: str, info: DeviceInfo) -> str:
    if backend == "vulkan-spirv":
        fits = preflight.fitting_targets(info, backend="vulkan-spirv")
        return (f"the device's Vulkan device ({', '.join(info.vulkan_devices)}) computes this "
                f"module wrongly; build for a target that fits it: {', '.join(fits)}")
    return "compare the report with `edgekit validate --local` on the host to tell a device " \
           "problem from a compiler one"
