"""`edgekit bundle inspect|verify BUNDLE`: parse, call edgekit.api.bundle, render."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.common import JSON, WIDE, examples, handle_errors

BUNDLE_ARG = click.argument("bundle", type=click.Path(path_type=Path))


@click.group()
def bundle() -> None:
    """Look into a built bundle (a directory or .tar from `edgekit build`)."""


@bundle.command("inspect", epilog=examples(
    "edgekit bundle inspect build/kws-mlp-rpi4",
    "edgekit bundle inspect build/kws-mlp-host.tar --json"))
@BUNDLE_ARG
@JSON
@WIDE
@handle_errors
def bundle_inspect(bundle: Path, as_json: bool) -> None:
    """What BUNDLE holds: app, target, model source, files and sizes, signer, validation
    samples, toolchain versions."""
    from edgekit.api.bundle import inspect
    summary = inspect(bundle)
    if as_json:
        render.emit_json(summary.as_json())
        return
    s = summary
    say = render.out.print
    say(f"[bold]{escape(s.app)}[/] for {escape(s.target)} ({s.backend}, {s.arch}), "
        f"release {s.release}, built {escape(s.created_at)}", highlight=False)
    say(f"  model: {escape(s.model_source)}; lowering {escape(s.lowering)}"
        + (f"; quantization {escape(s.quantization)}" if s.quantization else ""),
        highlight=False)
    say(f"  signature: {escape(s.signature)}", highlight=False)
    say(f"  validation: {s.validation_samples} sample(s), {s.golden_files} golden file(s)",
        highlight=False)
    say("  toolchain: " + ", ".join(f"{escape(k)} {escape(v)}" for k, v in s.toolchain.items()),
        highlight=False)
    table = render.fitted_table(f"{len(s.files)} files, {s.total_bytes:,} bytes",
                                [("file", "short"), ("bytes", "num"), ("sha256", "short")])
    for f in s.files:
        table.add_row(escape(f.path), f"{f.bytes:,}", f.sha256[:16])
    say(table)


@bundle.command("verify", epilog=examples(
    "edgekit bundle verify build/kws-mlp-rpi4",
    "edgekit bundle verify build/kws-mlp-host.tar --json"))
@BUNDLE_ARG
@JSON
@handle_errors
def bundle_verify(bundle: Path, as_json: bool) -> None:
    """Check BUNDLE as a deploy does before uploading: plain files with a bundle's names only,
    nothing unlisted, every sha256, a trusted signature. Exit 6 when a check fails."""
    from edgekit.api.bundle import verify
    verdict = verify(bundle)
    if as_json:
        render.emit_json(verdict.as_json())
        return
    render.out.print(f"[green]ok[/] {escape(str(bundle))}: release {verdict.release}, "
                     f"{verdict.files} files, {verdict.bytes:,} bytes, signed by "
                     f"{escape(verdict.signer)}", highlight=False)
    for check in verdict.checks:
        render.out.print(f"  checked: {escape(check)}", highlight=False)
