"""Rendering of `--dry-run` (deploy, rollback, fleet update): what would happen, in the order
it would happen, and that nothing was changed. The decisions are edgekit.api.dry_run's."""

from __future__ import annotations

from dataclasses import asdict

from rich.markup import escape

from edgekit.cli import render

DRY_RUN_HELP = ("say what would be built (cache hit or not), uploaded and activated, per "
                "device; change nothing on any device")


def as_json(result) -> dict:
    return {"dry_run": True, **asdict(result)}


def show_dry_run(result, show, as_json_wanted: bool) -> None:
    """A command's --dry-run answer: its JSON, or `show`'s lines."""
    if as_json_wanted:
        render.emit_json(as_json(result))
    else:
        show(result)


def deploy_plan(result) -> None:
    say = render.out.print
    say(f"[bold]dry run[/]: nothing was changed on {escape(render.named(result.device))}",
        highlight=False)
    say(f"  build: {escape(result.build)}", highlight=False)
    if result.plan is None:
        say("  preflight: the device can run the target; upload, validation and activation "
            "are known once the bundle is built", highlight=False)
        return
    _plan_lines(result.plan, indent="  ")


def _plan_lines(plan, indent: str) -> None:
    say = render.out.print
    runs = f"runs variant {plan.variant}" if plan.variant else "runs the baseline module"
    say(f"{indent}preflight: passed ({runs}; signed by {escape(plan.signer or 'nobody: allowed')}"
        + (f"; {escape(plan.npu)}" if plan.npu else "")
        + ("; an older build than the device's newest, allowed" if plan.downgrade else "")
        + ")", highlight=False)
    if plan.provision:
        say(f"{indent}provision: the IREE runtime and the shims would be installed first",
            highlight=False)
    up = plan.upload
    if up.present:
        say(f"{indent}upload: nothing, release {plan.release} is on the device and verifies",
            highlight=False)
    else:
        how = "repaired in place (a live copy is corrupted)" if up.repair else "staged"
        say(f"{indent}upload: {len(up.send)} file(s), {up.send_bytes:,} bytes, {how}"
            + (f"; {len(up.reuse)} file(s), {sum(b for _, b, _ in up.reuse):,} bytes, copied "
               "from the device's other releases" if up.reuse else ""), highlight=False)
        for name, size in up.send:
            say(f"{indent}  send {escape(name)} ({size:,} bytes)", highlight=False)
        for name, size, source in up.reuse:
            say(f"{indent}  copy {escape(name)} ({size:,} bytes) from {escape(source)}",
                highlight=False)
    say(f"{indent}validate: {plan.samples} sample(s) run on the device, compared here"
        + ("; then the latency gate" if plan.gate else ""), highlight=False)
    if plan.activate:
        was = f" (now {plan.previous})" if plan.previous else " (no current release now)"
        say(f"{indent}activate: `current` would move to {plan.release}{was}", highlight=False)
    else:
        say(f"{indent}activate: nothing, {plan.release} is current already", highlight=False)
    if plan.hooks:
        say(f"{indent}hooks: {', '.join(plan.hooks)}", highlight=False)


def rollback_plan(result) -> None:
    say = render.out.print
    say(f"[bold]dry run[/]: nothing was changed on {escape(render.named(result.device))}",
        highlight=False)
    if result.provision:
        say("  provision: the IREE runtime and the shims would be installed first",
            highlight=False)
    state = ("its files verify" if result.verifies else
             f"it does NOT verify ({escape(result.problem)}): the rollback would be refused"
             if result.verifies is False else escape(result.problem))
    say(f"  {result.app}: `current` would move from {result.current or '(none)'} to "
        f"{result.to}; {state}", highlight=False)


def fleet_plan(result) -> None:
    say = render.out.print
    say(f"[bold]dry run[/] of the {escape(result.app)} update: nothing was built or changed",
        highlight=False)
    for build in result.builds:
        known = f", release {build.release}" if build.release else ""
        say(f"  build for {escape(build.target)}: {escape(build.note)}{known}", highlight=False)
    for index, names in enumerate(result.waves, 1):
        say(f"  wave {index}: {', '.join(names)}", highlight=False)
        for device in (d for d in result.devices if d.wave == index):
            reason = f": {escape(device.reason)}" if device.reason else ""
            say(f"    {escape(device.device)} ({escape(device.target)}) "
                f"{device.action}{reason}", highlight=False)
            if device.plan is not None:
                _plan_lines(device.plan, indent="      ")
