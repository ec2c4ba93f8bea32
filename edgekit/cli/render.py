"""Rendering results for people (rich tables) and machines (--json)."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from edgekit.models.report import ValidationReport
from edgekit.pipeline.build import BuildResult

out = Console()
err = Console(stderr=True)


def emit_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def build_summary(result: BuildResult) -> None:
    m = result.bundle.manifest
    state = "[green]cached[/]" if result.cached else "[green]built[/]"
    out.print(f"{state} {m.app} for {m.target} in {result.seconds:.2f} s → {result.bundle.path}")
    for attempt in m.lowering.attempts:
        if attempt.ok:
            continue
        ops = f" ({', '.join(attempt.ops)})" if attempt.ops else ""
        out.print(f"  [yellow]lowering {attempt.lowering} failed at {attempt.stage}{ops}[/]: "
                  f"{attempt.error}")
    fell_back = len(m.lowering.attempts) > 1
    note = " (fallback)" if fell_back else ""
    out.print(f"  lowering: {m.lowering.used}{note} (requested {m.lowering.requested}); "
              f"iree {m.compiler_version}; module {result.bundle.module.stat().st_size:,} bytes")
    if result.stage_seconds and not result.cached:
        stages = ", ".join(f"{k} {v:.2f}s" for k, v in result.stage_seconds.items())
        out.print(f"  stages: {stages}")
    if result.tar:
        out.print(f"  archive: {result.tar}")


def build_json(result: BuildResult) -> dict:
    return {"bundle": str(result.bundle.path), "cached": result.cached,
            "seconds": round(result.seconds, 3), "stage_seconds": result.stage_seconds,
            "tar": str(result.tar) if result.tar else None,
            "manifest": result.bundle.manifest.model_dump(mode="json")}


def validation_table(report: ValidationReport) -> None:
    table = Table(title=f"{report.app} on {report.where} ({report.target})")
    for col in ("output", "shape", "max abs err", "max rel err", "cosine", "top-1", "result"):
        table.add_column(col, justify="right" if col not in ("output", "result") else "left")
    for c in report.outputs:
        top1 = "-" if c.top1_agreement is None else f"{c.top1_agreement:.0%}"
        result = "[green]ok[/]" if c.ok else "[red]FAIL[/] " + "; ".join(c.problems)
        table.add_row(c.name, "×".join(map(str, c.shape)), f"{c.max_abs_error:.3g}",
                      f"{c.max_rel_error:.3g}", f"{c.cosine:.6f}", top1, result)
    out.print(table)
    verdict = "[green]PASS[/]" if report.ok else "[red]FAIL[/]"
    out.print(f"{verdict} ({report.seconds * 1000:.1f} ms run)")


def deploy_summary(result) -> None:
    validation_table(result.report)
    moved = (f"uploaded {result.uploaded_files} file(s), {result.uploaded_bytes:,} bytes"
             if result.uploaded_files else "identical release already on the device: no payload")
    state = (f"activated {result.release}" + (f" (was {result.previous})" if result.previous
                                              else "")
             if result.activated else f"{result.release} was already current")
    out.print(f"[green]deployed[/] {result.app} to {result.device}: {state}; {moved}"
              + ("; provisioned the runtime" if result.provisioned else "")
              + f" in {result.seconds:.2f} s")
    if result.pruned:
        out.print(f"  pruned old releases: {', '.join(result.pruned)}")


def deploy_json(result) -> dict:
    from dataclasses import asdict
    data = asdict(result)
    data["report"] = result.report.model_dump(mode="json")
    return data


def probe_table(device: str, info) -> None:
    table = Table(title=device, show_header=False)
    table.add_column("key")
    table.add_column("value")
    flags = " ".join(info.cpu_flags)
    rows = [("arch", info.arch), ("cpu", info.cpu_model or "-"), ("cpu part", info.cpu_part or "-"),
            ("cpu features", flags[:100] + ("…" if len(flags) > 100 else "")),
            ("cores", str(info.cores)), ("memory", f"{info.mem_kb // 1024} MiB"),
            ("free (.edgekit)", f"{info.free_kb // 1024} MiB"), ("os", info.os),
            ("glibc", info.glibc), ("vulkan", ", ".join(info.vulkan_devices) or "none"),
            ("npu nodes", ", ".join(info.npu_nodes) or "none"),
            ("runtimes", ", ".join(info.runtimes) or "none"),
            ("shims", ", ".join(info.shims) or "none")]
    for key, value in rows:
        table.add_row(key, value)
    out.print(table)
