"""`edgekit deploy`: a bundle (or a recipe built first) shipped, validated on the device and
activated."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from edgekit.cli import complete, render
from edgekit.cli.common import ALLOW_UNSIGNED, HOST_HELP, IDENTITY, JSON, TRUST_PICKLE, WIDE, \
    changing, examples, handle_errors
from edgekit.cli.dry_run import DRY_RUN_HELP, show_dry_run

# deploy's stages (api.deploy, device.deploy) that change nothing on the device
DEPLOY_STAGES_THAT_READ = frozenset({"build", "connect and preflight", "preflight"})


@click.command(epilog=examples(
    "edgekit deploy build/kws-mlp-rpi4 --host lab-aarch64-1",
    "edgekit deploy --recipe recipes/kws_mlp.yaml --target rpi4 --host HOST",
    "edgekit deploy build/kws-mlp-host.tar --host lab-x86_64-1 --json",
    "edgekit deploy --recipe r.yaml --target rpi4 --host HOST --dry-run"))
@click.argument("bundle", required=False, type=click.Path(path_type=Path))
@click.option("--target", help="target profile name or YAML path (with --recipe)",
              shell_complete=complete.targets)
@click.option("--recipe", type=click.Path(path_type=Path), help="recipe YAML, built first",
              shell_complete=complete.recipes)
@click.option("--host", required=True, help=HOST_HELP, shell_complete=complete.devices)
@IDENTITY
@click.option("--keep", default=3, show_default=True, help="releases kept on the device")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has this build")
@ALLOW_UNSIGNED
@TRUST_PICKLE
@click.option("--cpu-fallback", is_flag=True,
              help="an NPU bundle: deploy its IREE CPU module on a device without the NPU")
@click.option("--allow-downgrade", is_flag=True,
              help="deploy a build older than the newest release activated on the device "
                   "(recorded in the device's journal)")
@JSON
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@WIDE
@handle_errors
def deploy(bundle: Path | None, target: str | None, recipe: Path | None, host: str,
           identity: Path | None, keep: int, no_cache: bool, allow_unsigned: bool,
           trust_pickle: bool, cpu_fallback: bool, allow_downgrade: bool,
           as_json: bool, dry_run: bool = False) -> None:
    """Ship BUNDLE (a directory or .tar from `edgekit build`), or build --recipe for --target
    first; check the device, upload, validate on the device, then activate."""
    from edgekit.api.deploy import DeployOptions, deploy as run_deploy
    from edgekit.errors import ValidationFailed
    options = DeployOptions(host=host, bundle=bundle, recipe=recipe, target=target,
                            identity=identity, keep=keep, use_cache=not no_cache,
                            allow_unsigned=allow_unsigned, trust_pickle=trust_pickle,
                            cpu_fallback=cpu_fallback, allow_downgrade=allow_downgrade)
    if dry_run:   # the plan, read from the device (cli/dry_run.py renders it)
        from edgekit.api.dry_run import deploy_dry_run
        from edgekit.cli.dry_run import deploy_plan
        return show_dry_run(deploy_dry_run(options), deploy_plan, as_json)

    def stage(name: str, show=None) -> None:
        if name not in DEPLOY_STAGES_THAT_READ:
            changing(f"the deploy's {name} step on {host}")
        if show:
            show(f"{name}…")
    try:
        if as_json:
            result = run_deploy(options, on_stage=stage)
        else:
            with render.steps("deploying…") as status:
                result = run_deploy(options, on_stage=lambda n: stage(n, status.update))
    except ValidationFailed as exc:
        # where it goes wrong: bisect rebuilds from the recipe, or from the bundle's manifest
        # (its model source must be on this machine; bisect says so otherwise)
        offer = shlex.join(["edgekit", "bisect", "--recipe", str(recipe), "--target", target,
                            "--host", host]) if recipe and target else \
            shlex.join(["edgekit", "bisect", "--bundle", str(bundle), "--host", host]) \
            if bundle else None
        if as_json:
            render.emit_json({"ok": False, "error": exc.what, "exit": exc.exit_code,
                              "hint": exc.hint, "report": exc.report.model_dump(mode="json"),
                              "bisect": offer})
        else:
            render.validation_table(exc.report)
            if offer:
                render.err.print(f"to find the first layer that goes wrong: {offer}",
                                 highlight=False, markup=False)
        raise
    if as_json:
        render.emit_json(render.deploy_json(result))
    else:
        render.deploy_summary(result)
