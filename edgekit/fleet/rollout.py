"""`edgekit fleet update|resume`: build once per target, then update the fleet in waves.

Each device goes through the deploy path (preflight, upload, verify, on-device validation),
then the latency gate (the new release and the one it replaces benchmarked on that device in
interleaved rounds, before the switch), then activation and the device hooks. A device that
fails any of these keeps (or gets back) its previous release. After each wave the failures are
counted against `max_fail`; past it the rollout halts, and `rollback_on_halt` returns the
devices already updated (in that wave, or in every wave) to their previous release.

A device that already runs the release (its `current` is the release and its files verify) costs
one command and is reported "unchanged, already current" — no upload, validation, gate or
hooks — unless the rollout asks to `revalidate`. Before the build only the first wave's devices
are preflighted (the build is proven on them before anything else moves); every later device
is checked by its own deploy when its wave starts.

Every step is journaled locally before the next begins; `resume` replays the journal and
continues with the devices that have no result, using the previous release each one had when
the rollout first touched it (the device itself may already be switched: activation is one
rename on the device, so it is either on the old release or the new one, never in between).
"""

from __future__ import annotations

import datetime
import math
import secrets
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit import speed
from edgekit.config.fleet import Fleet, FleetDevice, RolloutPolicy, load_fleet
from edgekit.config.recipe import Hooks, Recipe, load_recipe
from edgekit.device import layout
from edgekit.device.bench import RoundConfig, bench_round, remote_manifest, run_configs
from edgekit.config.profiles import load_target
from edgekit.device.deploy import (DeployPolicy, Fallback, Gate, deploy_verified,
                                   expected_sums, preflight_target, release_id,
                                   restore_release)
from edgekit.device.probe import DeviceInfo
from edgekit.device.provision import shim_version
from edgekit.device.releases import current_release, live_release
from edgekit.errors import ConfigError, EdgekitError, HealthGateFailed
from edgekit.fleet import journal as jr
from edgekit.fleet.waves import halts, plan_waves
from edgekit.models.bundle import MODULE, VARIANTS, Bundle
from edgekit.toolchain.verified import VerifiedBundle, open_verified
from edgekit.models.events import (AlreadyFinished, BuildStarted, DeviceDone, DevicePreflight,
                                   DeviceRolledBack, DeviceStarted,
                                   DeviceStep, Finished, Halted, Interrupted, RolloutEvent,
                                   RolloutResumed, RolloutStarted, WaveDone, WaveStarted)
from edgekit.models.fleet import FleetResult, RolloutPlan
from edgekit.config.address import safe_name
from edgekit.transport import open_device
from edgekit.transport.base import Transport


MAX_GATE_SAMPLES = 400     # per round: the benchmark's JSON grows ~0.7 kB per sample
# Lab and local: devices run on this machine's CPUs: their timings include the controller and
# every other device of the wave (8 gates at once on 2 cores flagged identical models ×1.6,
# and a 50-device rollout of an identical build halted on a false ×1.50). Serialising them
# behind a lock cost 3-4 s per device; their gate is skipped with this note instead, unless
# the rollout asks for it (`gate_shared_cpus`).
SHARED_CPUS_NOTE = ("latency gate skipped: the device runs on this machine's CPUs (lab or "
                    "local:), so its timings measure the controller too "
                    "(rollout.gate_shared_cpus: true measures anyway)")


@dataclass(frozen=True)
class UpdateOptions:
    fleet: Path
    recipe: Path
    limit: str | None = None
    policy: dict = field(default_factory=dict)   # RolloutPolicy fields given on the command line
    keep: int = 3
    use_cache: bool = True
    cpu_fallback: bool = False      # NPU targets: deploy the IREE CPU module, no NPU needed
    revalidate: bool = False        # devices already on the release: deploy and validate again
    allow_downgrade: bool = False   # a build older than a device's newest release (journaled)


Progress = Callable[[RolloutEvent], None]
# target profile → the recipe's bundle built for it (the application layer builds)
BuildFor = Callable[[str], Bundle]


def update_inputs(options: UpdateOptions):
    """(the fleet's selected devices, the recipe, the rollout policy with the command line's
    overrides) — what an update, or its dry run, starts from."""
    fleet = load_fleet(options.fleet).select(options.limit)
    recipe = load_recipe(options.recipe)
    try:
        policy = RolloutPolicy.model_validate({**fleet.rollout.model_dump(), **options.policy})
    except ValueError as exc:
        raise ConfigError(f"invalid rollout option: {exc}", key="rollout") from None
    return fleet, recipe, policy


def update(options: UpdateOptions, build_for: BuildFor,
           on_event: Progress | None = None) -> FleetResult:
    """Plan the rollout (one `build_for` per target profile), journal the plan, then run it."""
    fleet, recipe, policy = update_inputs(options)
    hooks = merged_hooks(recipe, fleet)
    now = datetime.datetime.now(datetime.timezone.utc)
    rollout_id = f"{safe_name(recipe.name, 'app')}-{now:%Y%m%dT%H%M%S}-{secrets.token_hex(2)}"
    directory = jr.rollouts_dir() / rollout_id
    directory.mkdir(parents=True)
    waves = plan_waves(fleet.devices, lambda d: d.target, policy.canary, policy.waves)
    try:
        _preflight(waves[0], policy.concurrency, on_event, options.cpu_fallback)
        bundles, releases = _build_per_target(build_for, fleet, directory, on_event)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)   # nothing was planned: leave no trace
        raise
    plan = RolloutPlan(id=rollout_id, created_at=now.isoformat(timespec="seconds"),
                       app=recipe.name, recipe=str(options.recipe), fleet=fleet.source,
                       devices=fleet.devices,
                       waves=tuple(tuple(d.name for d in wave) for wave in waves),
                       policy=policy, hooks=hooks, bundles=bundles, releases=releases,
                       keep=options.keep, cpu_fallback=options.cpu_fallback,
                       revalidate=options.revalidate,
                       allow_downgrade=options.allow_downgrade)
    jr.save_plan(directory, plan)
    with jr.exclusive(directory), jr.Journal(directory, on_event) as journal:
        journal.write(RolloutStarted(rollout=rollout_id, waves=plan.waves))
        return _execute(plan, directory, journal)


def merged_hooks(recipe: Recipe, fleet: Fleet) -> Hooks:
    """The recipe's hooks, with what the fleet file sets taking precedence."""
    return Hooks.model_validate({**recipe.hooks.model_dump(exclude_none=True),
                                 **fleet.hooks.model_dump(exclude_none=True,
                                                          exclude_defaults=True)})


def resume(rollout_id: str | None = None, on_event: Progress | None = None) -> FleetResult:
    """Continue rollout `rollout_id` (default: the newest unfinished one) where its journal
    stopped. A rollout that had finished (the newest, when none is unfinished) is not run
    again: its result is returned as the journal has it, after an AlreadyFinished event."""
    try:
        directory = jr.find_rollout(rollout_id, unfinished=True)
    except ConfigError:
        if rollout_id is not None:
            raise
        directory = jr.find_rollout(None, unfinished=False)    # "no rollouts yet" if none
    finished = jr.replay(jr.read_events(directory)).finished
    if finished is not None:
        if on_event is not None:
            on_event(AlreadyFinished(rollout=directory.name, status=finished.status))
        return rollout_result(directory.name)
    plan = jr.load_plan(directory)
    with jr.exclusive(directory), jr.Journal(directory, on_event) as journal:
        journal.write(RolloutResumed(rollout=plan.id))
        return _execute(plan, directory, journal)


def rollout_result(rollout_id: str | None = None) -> FleetResult:
    directory = jr.find_rollout(rollout_id, unfinished=False)
    return jr.result_of(jr.load_plan(directory), jr.replay(jr.read_events(directory)), directory)


def _preflight(devices: list[FleetDevice], concurrency: int, on_event: Progress | None,
               cpu_fallback: bool = False) -> None:
    """Reach the first wave's devices and check they can run their targets before building
    anything (seconds, not minutes; at 10,000 devices, reaching all of them first took ~19
    min). When none can, the rollout stops here; otherwise the ones that cannot are reported
    now and fail in their wave, counted against max_fail as always. Later waves' devices are
    checked by their own deploys when their wave starts."""
    def check(device) -> str:
        try:
            identity = Path(device.identity) if device.identity else None
            with open_device(device.address, identity) as conn:
                preflight_target(conn, load_target(device.target), cpu_fallback)
            return ""
        except EdgekitError as exc:
            return f"{type(exc).__name__}: {exc.what}"
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="preflight") as pool:
        reasons = list(pool.map(check, devices))
    for device, reason in zip(devices, reasons):
        if on_event:
            on_event(DevicePreflight(device=device.name, ok=not reason, reason=reason))
    if reasons and all(reasons):
        raise ConfigError(f"no device of the first wave can take the release: {reasons[0]} "
                          f"({devices[0].name})" + (f" and {len(reasons) - 1} more"
                                                    if len(reasons) > 1 else ""),
                          key="devices", hint="nothing was built; check the addresses and "
                                              "keys (`edgekit fleet status`)")


def _build_per_target(build_for: BuildFor, fleet: Fleet, directory: Path,
                      on_event: Progress | None) -> tuple[dict[str, str], dict[str, str]]:
    """One build per target profile in the fleet, copied into the rollout (a later build to
    the same output folder must not change what a resume deploys)."""
    bundles, releases = {}, {}
    for index, target in enumerate(dict.fromkeys(d.target for d in fleet.devices)):
        if on_event:
            on_event(BuildStarted(target=target))
        built = build_for(target)
        copy = directory / "bundles" / f"{index}-{safe_name(Path(target).stem, 'target')}"
        shutil.copytree(built.path, copy)
        # verified once: an untrusted build stops the rollout before any device, and every
        # device of this process deploys this copy without parsing or checking it again
        bundle = open_verified(copy)
        _releases[str(copy)] = _Release(bundle, expected_sums(bundle))
        bundles[target] = str(copy)
        releases[target] = release_id(bundle)
    return bundles, releases


def _execute(plan: RolloutPlan, directory: Path, journal: jr.Journal) -> FleetResult:
    state = journal.state            # kept current by every write: never re-read
    if state.halt is None:
        try:
            _run_waves(plan, journal)
        except KeyboardInterrupt:
            journal.write(Interrupted())
            return jr.result_of(plan, state, directory)
    if state.halt is not None:
        _roll_back(plan, journal)
    journal.write(Finished(status="halted" if state.halt else "completed"))
    return jr.result_of(plan, state, directory)


def _run_waves(plan: RolloutPlan, journal: jr.Journal) -> None:
    state = journal.state
    for index, names in enumerate(plan.waves, start=1):
        if index in state.waves_done:
            continue
        if index not in state.waves_started:
            journal.write(WaveStarted(wave=index, devices=names))
        todo = [n for n in names if n not in state.done]
        with ThreadPoolExecutor(max_workers=plan.policy.concurrency,
                                thread_name_prefix="fleet") as pool:
            futures = [pool.submit(_update_device, plan, name, index, journal)
                       for name in todo]
            try:
                for future in as_completed(futures):
                    future.result()
            except KeyboardInterrupt:
                # devices in flight finish their step (each switch is atomic on the device);
                # devices not started stay untouched for the resume
                pool.shutdown(wait=True, cancel_futures=True)
                raise
        failed = sum(state.done[n].status == "failed" for n in names if n in state.done)
        halted = halts(failed, len(names), plan.policy.max_fail)
        journal.write(WaveDone(wave=index, failed=failed, halted=halted))
        if halted:
            journal.write(Halted(wave=index, rollback=plan.policy.rollback_on_halt,
                                 reason=f"wave {index}: {failed} of {len(names)} device(s) "
                                        f"failed, more than max_fail={plan.policy.max_fail}"))
            return


def _update_device(plan: RolloutPlan, name: str, wave: int, journal: jr.Journal) -> None:
    device = plan.device(name)
    release = plan.releases[device.target]
    started = time.perf_counter()
    known, previous = journal.state.previous_of(name)
    measured: dict = {}
    try:
        identity = Path(device.identity) if device.identity else None
        with open_device(device.address, identity) as conn:
            live = live_release(conn, plan.app, release, layout.shims_dir(shim_version()),
                                _release_of(plan, device.target).sums)
            if not known:
                previous = live.current
            journal.write(DeviceStarted(device=name, wave=wave, previous=previous))
            # on the release before this rollout touched it, intact: nothing to do (a device
            # the rollout switched before a crash still gets its hooks in the full path)
            if live.verified and previous == release and not plan.revalidate:
                status, reason = "unchanged", ALREADY_CURRENT
            else:
                status, reason = _deploy(conn, plan, device, previous, measured, journal,
                                         first_wave=wave == 1)
        failure = ""
    except Exception as exc:  # noqa: BLE001 — one device's failure must not stop the others
        status, failure = "failed", type(exc).__name__
        reason = (exc.what if isinstance(exc, EdgekitError) else str(exc)) or failure
        if isinstance(exc, EdgekitError) and exc.where and exc.where not in reason:
            reason = f"{reason} ({exc.where})"
    journal.write(DeviceDone(device=name, wave=wave, status=status, reason=reason,
                             failure=failure, previous=previous,
                             seconds=round(time.perf_counter() - started, 2),
                             p90_before_ms=measured.get("p90_before_ms"),
                             p90_after_ms=measured.get("p90_after_ms"),
                             p90_ratio=measured.get("ratio"),
                             p90_ratio_range=measured.get("ratio_range"),
                             p90_ratio_limit=plan.policy.max_p90_ratio
                             if "ratio" in measured else None,
                             dataset=measured.get("dataset")))


ALREADY_CURRENT = ("already current: its files verify on the device; not deployed or "
                   "validated again (--revalidate does)")


def _deploy(conn: Transport, plan: RolloutPlan, device: FleetDevice, previous: str | None,
            measured: dict, journal: jr.Journal, first_wave: bool = True) -> tuple[str, str]:
    """The full deploy of the device's bundle, gated; (status, note). The bundle's dataset
    gate runs in the first wave (the canary) only, unless it says `everywhere`; its score
    goes into `measured` (the journal's device-done)."""
    release = plan.releases[device.target]
    gate, note = None, ""
    if plan.policy.max_p90_ratio and previous and previous != release:
        if device.lab and not plan.policy.gate_shared_cpus:
            note = SHARED_CPUS_NOTE
        else:
            gate = latency_gate(plan.policy, plan.app, previous, measured)
    policy = DeployPolicy(keep=plan.keep, gate=gate, hooks=plan.hooks, hooks_when_current=True,
                          fallback=Fallback(previous), cpu_fallback=plan.cpu_fallback,
                          allow_downgrade=plan.allow_downgrade, dataset=first_wave)
    result = deploy_verified(conn, _release_of(plan, device.target).bundle, policy,
                             on_stage=lambda step: journal.write(
                                 DeviceStep(device=device.name, step=step),
                                 durable=step in jr.SWITCHING_STEPS))
    if "dataset" in result.accuracy:
        measured["dataset"] = result.accuracy["dataset"]
    return ("updated" if previous != release else "unchanged"), measured.get("note", note)


@dataclass(frozen=True)
class _Release:
    bundle: VerifiedBundle
    sums: tuple[str, ...]        # what a live copy holds as SHA256SUMS (deploy.expected_sums)


_releases: dict[str, _Release] = {}


def _release_of(plan: RolloutPlan, target: str) -> _Release:
    """The rollout's bundle for `target`, parsed and verified (sha256s, signature) once per
    process (a resumed rollout's copy too), with the SHA256SUMS a live copy of it holds; the
    devices' deploys take it as it is (each device's verify.sh checks what it received)."""
    path = plan.bundles[target]
    if path not in _releases:
        bundle = open_verified(path)
        _releases[path] = _Release(bundle, expected_sums(bundle))
    return _releases[path]


def latency_gate(policy: RolloutPolicy, app: str, baseline: str, measured: dict) -> Gate:
    """Bench `baseline` (the release being replaced) and the new release on the device in
    interleaved rounds, so load and clock drift hit both alike, and compare them round by
    round (see `p90_gate_figures`). Each round lasts at least `gate_round_s`; calls under
    a millisecond are timed in batches (the sample is the batch's mean call) — timed one by
    one, a 30 µs call's p90 measures the scheduler, not the model. A release whose module
    and runtime configuration are those of the release it replaces (a rebuild that changed
    only goldens, tolerances or hooks) cannot be slower: it is not measured, and the note
    says so. Fills `measured`."""
    def gate(conn: Transport, info: DeviceInfo, release: str) -> dict:
        manifests = {r: remote_manifest(conn, app, r) for r in (baseline, release)}
        # each release as it runs: its tuned driver and threads, or the policy's count
        wanted = (policy.gate_threads,) if policy.gate_threads else None
        runs_as = {r: run_configs(m, wanted)[0] for r, m in manifests.items()}
        if _same_module(manifests[baseline], manifests[release]) and \
                runs_as[baseline] == runs_as[release]:
            measured["note"] = (f"latency gate skipped: the module is byte for byte that of "
                                f"{baseline}, run the same way")
            return dict(measured)
        probe_run = bench_round(conn, info.arch, baseline, manifests[baseline],
                                RoundConfig(repetitions=5, threads=runs_as[baseline][0],
                                            driver=runs_as[baseline][1], warmup=1,
                                            conditions=False))
        call_ms = max(float(np.median(probe_run.samples_ms)), 1e-4)
        batch = max(1, math.ceil(1.0 / call_ms))
        per_round = min(MAX_GATE_SAMPLES, max(policy.gate_repetitions // policy.gate_rounds,
                                              math.ceil(1e3 * policy.gate_round_s /
                                                        (batch * call_ms))))
        rounds: dict[str, list[list[float]]] = {baseline: [], release: []}
        for _ in range(policy.gate_rounds):
            for r in (baseline, release):
                run = bench_round(conn, info.arch, r, manifests[r],
                                  RoundConfig(repetitions=per_round, threads=runs_as[r][0],
                                              driver=runs_as[r][1], warmup=2,
                                              conditions=False, calls_per_sample=batch))
                rounds[r].append(run.samples_ms)
        verdict = p90_gate_figures(rounds[baseline], rounds[release], policy.max_p90_ratio)
        measured.update(verdict, calls_per_sample=batch, samples_per_round=per_round)
        if verdict["regressed"]:
            raise HealthGateFailed(
                f"latency gate: p90 {verdict['p90_after_ms']:.3f} ms vs "
                f"{verdict['p90_before_ms']:.3f} ms for the release it replaces ({baseline}); "
                f"per-round ratio ×{verdict['ratio']:.2f} > ×{policy.max_p90_ratio} in "
                f"{verdict['rounds_over']} of {len(rounds[release])} rounds; not activated",
                where=conn.where,
                hint="compare with `edgekit bench`; raise rollout.max_p90_ratio if expected")
        return dict(measured)
    return gate


def _same_module(a, b) -> bool:
    """Two manifests whose modules (and variants) are the same bytes."""
    def modules(m) -> dict:
        return {rel: digest for rel, digest in m.files.items()
                if rel == MODULE or rel.startswith(f"{VARIANTS}/")}
    return modules(a) == modules(b) and MODULE in a.files


def p90_gate_figures(before: list[list[float]], after: list[list[float]],
                       max_ratio: float) -> dict:
    """Round i of `after` against round i of `before` (benched back to back), by their p90s
    and edgekit's one rule (edgekit/speed.py, bar `max_ratio`): the release regressed when
    it is slower beyond `max_ratio` and the pairing's noise, in two rounds of three or more.
    Pooled p90s of short rounds flagged identical models ×1.5–2 on a loaded machine; paired,
    longer rounds do not."""
    found = speed.verdict(speed.PairedRounds(
        base=tuple(float(np.percentile(b, 90)) for b in before),
        new=tuple(float(np.percentile(a, 90)) for a in after)), bar=max_ratio - 1)
    ratios = [float(np.percentile(a, 90) / np.percentile(b, 90)) for b, a in zip(before, after)]
    return {"p90_before_ms": round(float(np.percentile(sum(before, []), 90)), 4),
            "p90_after_ms": round(float(np.percentile(sum(after, []), 90)), 4),
            "ratio": round(found.ratio, 3), "rounds_over": found.beyond_bar,
            "ratio_range": (round(min(ratios), 3), round(max(ratios), 3)),
            "noise": round(found.noise, 3), "regressed": found.call == speed.SLOWER}


def _roll_back(plan: RolloutPlan, journal: jr.Journal) -> None:
    """Return the updated devices in the halt's scope to their previous release — and the
    failed ones that got as far as activation (their own restore may not have happened: the
    connection dropped, the previous release was corrupted): those are checked, and restored
    only if `current` is not their previous release."""
    state = journal.state
    if state.halt is None or state.halt.rollback == "none":
        return
    scope, halted_wave = state.halt.rollback, state.halt.wave
    switched = state.switched
    in_scope = {n: done for n, done in state.done.items()
                if n not in state.rollbacks and (scope == "all" or done.wave == halted_wave)}
    updated = [n for n, done in in_scope.items() if done.status == "updated"]
    failed = [n for n, done in in_scope.items() if done.status == "failed" and n in switched]
    with ThreadPoolExecutor(max_workers=plan.policy.concurrency,
                            thread_name_prefix="rollback") as pool:
        futures = [pool.submit(_restore, plan, n, state.done[n].previous, journal)
                   for n in updated]
        futures += [pool.submit(_restore, plan, n, state.done[n].previous, journal,
                                only_if_moved=True) for n in failed]
        for future in futures:
            future.result()


def _restore(plan: RolloutPlan, name: str, previous: str | None, journal: jr.Journal,
             only_if_moved: bool = False) -> None:
    device = plan.device(name)
    try:
        identity = Path(device.identity) if device.identity else None
        with open_device(device.address, identity) as conn:
            if only_if_moved and current_release(conn, plan.app) == previous:
                return   # the device's own restore worked: it stays "failed"
            restore_release(conn, plan.app, previous, layout.shims_dir(shim_version()))
        journal.write(DeviceRolledBack(
            device=name, status="rolled-back", to=previous,
            reason=f"rolled back to {previous or 'no release'} after the halt"))
    except Exception as exc:  # noqa: BLE001 — keep rolling back the others
        reason = exc.what if isinstance(exc, EdgekitError) else str(exc)
        journal.write(DeviceRolledBack(device=name, status="rollback-failed", to=previous,
                                       reason=f"rollback failed: {reason}"))
