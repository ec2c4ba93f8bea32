"""`edgekit check MODEL`: which operators make it through to the target's compiler."""

from __future__ import annotations

import click

from edgekit.cli import complete, render
from edgekit.cli.common import JSON, TRUST_PICKLE, WIDE, examples, handle_errors


@click.command(epilog=examples(
    "edgekit check edgekit.examples.models:kws_mlp",
    "edgekit check model.onnx --target rpi4 --json"))
@click.argument("model")
@click.option("--target", default="host", show_default=True, help="target profile",
              shell_complete=complete.targets)
@TRUST_PICKLE
@JSON
@WIDE
@handle_errors
def check(model: str, target: str, trust_pickle: bool, as_json: bool) -> None:
    """Which operators of MODEL (.onnx, .pt2, recipe .yaml or module:factory) make it through
    import, TOSA, Linalg and the target's compiler. Exit 0 when the model can be built; a model
    the build refuses before lowering (uninformative golden outputs) exits as that build would."""
    from edgekit.api.check import check as run_check, unsupported_ops
    from edgekit.errors import NotBuildable
    with render.status("checking operators…") as status:
        def progress(line: str) -> None:  # one line per step, on stderr (stdout may be JSON)
            render.progress(f"check: {line}", markup=False)
            status.update(f"checking operators… {line}")
        report = run_check(model, target, trust_pickle=trust_pickle, on_progress=progress)
    if as_json:
        from dataclasses import asdict
        render.emit_json({**asdict(report), "buildable": report.buildable})
    elif hasattr(report, "accelerator"):       # an NPU target's placement table
        render.npu_check_table(report)
    else:
        render.check_table(report)
    if not report.buildable and hasattr(report, "accelerator"):
        bad = unsupported_ops(report)
        raise NotBuildable(f"{', '.join(bad)}: neither the NPU nor the CPU fallback of "
                           f"{target} runs {'it' if len(bad) == 1 else 'them'}",
                           hint="replace the op, or pick a target with a CPU (see the reasons)")
    if getattr(report, "refusal", None) is not None:   # as the build refuses it, same exit
        raise report.refusal
    if not report.buildable:
        raise NotBuildable(f"no lowering builds {model} for {target}",
                           hint="see each operator's first failure and its reproducer")
