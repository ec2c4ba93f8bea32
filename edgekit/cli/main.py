"""The `edgekit` command. Each command parses, calls one edgekit function and renders.

Exit codes (decided here only, from the error's class — see edgekit.errors):
0 ok · 1 other edgekit error · 2 bad recipe/profile/option · 3 model load/export ·
4 lowering/compile · 5 external tool · 6 bad bundle · 7 cannot run here · 8 validation failed
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.errors import EdgekitError, LoweringError, ValidationFailed


def handle_errors(fn):
    """Turn edgekit errors into a message and exit code; no tracebacks for user errors."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        try:
            return fn(*args, **kwargs)
        except EdgekitError as exc:
            render.err.print("[red]error:[/] " + escape(str(exc)), highlight=False, soft_wrap=True)
            if isinstance(exc, LoweringError) and exc.reproducer:
                    render.err.print(f"  reproducer: {escape(exc.reproducer)}", highlight=False)
            sys.exit(exc.exit_code)
    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgekit")
def cli() -> None:
    """Take a PyTorch model to edge devices and prove it runs there, correctly and fast."""


@cli.command()
@click.option("--recipe", "recipe", required=True, type=click.Path(path_type=Path),
              help="recipe YAML")
@click.option("--target", "target", required=True, help="target profile name or YAML path")
@click.option("--out", type=click.Path(path_type=Path), help="bundle directory "
              "[default: build/<app>-<target>]")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has this build")
@click.option("--tar", is_flag=True, help="also write the bundle as <out>.tar")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@handle_errors
def build(recipe: Path, target: str, out: Path | None, no_cache: bool, tar: bool,
          as_json: bool) -> None:
    """Build a deployable bundle for a target from a recipe."""
    from edgekit.pipeline.build import BuildOptions, build as run_build
    options = BuildOptions(recipe=recipe, target=target, out=out, use_cache=not no_cache, tar=tar)
    if as_json:
        render.emit_json(render.build_json(run_build(options)))
        return
    with render.err.status("building…") as status:
        result = run_build(options, on_stage=lambda name: status.update(f"{name}…"))
    render.build_summary(result)


@cli.command()
@click.option("--recipe", type=click.Path(path_type=Path),
              help="recipe YAML [default: the MobileNetV2-like example]")
@click.option("--target", default="host", show_default=True, help="target profile")
@handle_errors
def demo(recipe: Path | None, target: str) -> None:
    """Build an example model for this machine and validate it here, end to end."""
    from edgekit.demo import DEFAULT_RECIPE, run_demo
    with render.err.status("building…") as status:
        result = run_demo(recipe or DEFAULT_RECIPE, target,
                          on_stage=lambda name: status.update(f"{name}…"))
    render.build_summary(result.build)
    render.validation_table(result.report)
    if not result.report.ok:
        raise ValidationFailed("outputs differ from the golden reference beyond the bundle's "
                               "tolerances", report=result.report)


@cli.command()
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--local", is_flag=True, required=True,
              help="run on this machine (device validation comes with `edgekit deploy`)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@handle_errors
def validate(bundle: Path, local: bool, as_json: bool) -> None:
    """Run a bundle's golden inputs and compare with its golden outputs."""
    from edgekit.validate.local import validate_local
    report = validate_local(bundle)
    if as_json:
        render.emit_json(report.model_dump(mode="json"))
    else:
        render.validation_table(report)
    if not report.ok:
        raise ValidationFailed("outputs differ from the golden reference beyond the bundle's "
                               "tolerances", report=report)


@cli.group()
def targets() -> None:
    """List and inspect target profiles."""


@targets.command("list")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def targets_list(as_json: bool) -> None:
    """Every profile found (EDGEKIT_TARGETS_PATH, ./targets, built-in)."""
    from rich.table import Table

    from edgekit.config.target import available_targets, load_target
    rows = [load_target(str(path)) for path in available_targets().values()]
    if as_json:
        render.emit_json([t.model_dump(mode="json") for t in rows])
        return
    table = Table()
    for col in ("name", "arch", "backend", "cpu / gpu", "description"):
        table.add_column(col)
    for t in rows:
        device = t.cpu.cpu if t.cpu else (t.vulkan.target if t.vulkan else "")
        table.add_row(t.name, t.arch, t.backend, device, t.description)
    render.out.print(table)


@targets.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def targets_show(name: str, as_json: bool) -> None:
    """A profile after `extends:`, with the iree-compile flags it implies."""
    from edgekit.config.target import load_target
    from edgekit.toolchain.iree import target_flags
    target = load_target(name)
    data = {**target.model_dump(mode="json"), "iree_compile_flags": list(target_flags(target))}
    if as_json:
        render.emit_json(data)
        return
    import yaml
    render.out.print(yaml.safe_dump(data, sort_keys=False), highlight=False, markup=False)


@cli.command()
@click.argument("kind", type=click.Choice(["recipe"]))
@handle_errors
def schema(kind: str) -> None:
    """Print the JSON Schema of a config file kind (for editor autocompletion)."""
    from edgekit.config.recipe import recipe_json_schema
    sys.stdout.write(json.dumps(recipe_json_schema(), indent=2) + "\n")


def main() -> None:
    cli(prog_name="edgekit")


if __name__ == "__main__":
    main()
