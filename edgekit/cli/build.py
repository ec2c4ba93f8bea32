"""`edgekit build`: a deployable bundle for a target from a recipe (or the quantization modes
compared)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import IDENTITY, JSON, TRUST_PICKLE, WIDE, changing, examples, \
    handle_errors


@click.command(epilog=examples(
    "edgekit build --recipe recipes/kws_mlp.yaml --target rpi4",
    "edgekit build model.onnx --target rpi4",
    "edgekit build --recipe recipes/kws_mlp.yaml --target host --tar",
    "edgekit build --recipe r.yaml --target rpi4 --compare-quantization"))
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option("--recipe", "recipe", type=click.Path(path_type=Path),
              help="recipe YAML (or give MODEL: an .onnx or .pt2 file; its recipe is written "
              "to build/<name>.recipe.yaml)", shell_complete=complete.recipes)
@click.option("--target", "target", required=True, help="target profile name or YAML path",
              shell_complete=complete.targets)
@click.option("--out", type=click.Path(path_type=Path), help="bundle directory "
              "[default: build/<app>-<target>]")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has this build")
@click.option("--tar", is_flag=True, help="also write the bundle as <out>.tar")
@click.option("--no-tuned", is_flag=True, help="ignore `edgekit tune`'s choice: the profile's "
              "default lowering and flags")
@click.option("--compare-quantization", is_flag=True, help="build fp32, int8 (with the "
              "recipe's calibration), int8-weights and fp16; report size, accuracy, latency")
@click.option("--host", help="with --compare-quantization: validate and time the variants on "
              "this device (never activated, removed afterwards)",
              shell_complete=complete.devices)
@IDENTITY
@TRUST_PICKLE
@JSON
@WIDE
@handle_errors
def build(model: Path | None, recipe: Path | None, target: str, out: Path | None,
          no_cache: bool, tar: bool,
          no_tuned: bool, compare_quantization: bool, host: str | None, identity: Path | None,
          trust_pickle: bool, as_json: bool) -> None:
    """Build a deployable bundle for a target from a recipe, or from a model file."""
    from edgekit.api.build import BuildOptions, build as run_build
    from edgekit.errors import ConfigError
    if (model is None) == (recipe is None):
        raise ConfigError("give a model file (MODEL.onnx or MODEL.pt2) or --recipe, one of them",
                          key="recipe", hint="edgekit build model.onnx --target host")
    generated = None
    if model is not None:
        from edgekit.api.model_file import recipe_for_model
        generated = recipe_for_model(model, out)
        recipe = generated.path
        if not as_json:
            render.progress(f"recipe: {escape(str(generated.path))} "
                        f"({'written' if generated.written else 'written earlier, used as it is'}"
                        "; edit it for samples, quantization and tolerances)")
    options = BuildOptions(recipe=recipe, target=target, out=out, use_cache=not no_cache, tar=tar,
                           use_tuned=not no_tuned, trust_pickle=trust_pickle)
    if host and not compare_quantization:
        raise ConfigError("--host goes with --compare-quantization (to deploy, use "
                          "`edgekit deploy`)", key="host")
    if compare_quantization:
        from edgekit.api.compare_quantization import compare_quantization as compare
        if host:
            changing(f"a comparison that tries variants on {host}",
                     hint="tried releases are never activated and are removed as the trial "
                          "stops: `edgekit releases HOST --app APP` lists what is there")
        with render.steps("building…") as status:
            results = compare(options, say=status.update, host=host, identity=identity)
        if as_json:
            render.emit_json(render.quantization_comparison_json(results))
        else:
            render.quantization_comparison(results)
        return
    if as_json:
        answer = render.build_json(run_build(options))
        if generated is not None:
            answer["recipe"] = str(generated.path)
        render.emit_json(answer)
        return
    with render.steps("building…") as status:
        result = run_build(options, on_stage=lambda name: status.update(f"{name}…"))
    render.build_summary(result)
