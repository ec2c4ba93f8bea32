"""Rendering results for people (rich tables) and machines (--json).

Text from outside (a device's probe, journal, hook output, bench conditions; a user's file)
reaches the terminal only through this module, and this module is where it is made harmless:
`untrusted(text)` escapes its control characters and its rich markup where a command puts it
in a line; and the consoles themselves (`SafeConsole`) escape any control character a string
still carries (a newline and a tab excepted) and print a line whose markup does not parse as
the plain text it is, so a forgotten `untrusted` costs looks, never a raw terminal escape or a
crash (rich's MarkupError on a device's `[/]`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from edgekit.errors import printable

if TYPE_CHECKING:  # the build pipeline imports torch: not for `edgekit --help`
    from edgekit.models.fleet import FleetDeviceStatus
    from edgekit.models.report import ValidationReport
    from edgekit.api.build import BuildResult

_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(0x00, 0x20), *range(0x7f, 0xa0))
             if chr(c) not in "\n\t"}


def escape_controls(text: str) -> str:
    """`text` with every control character but newline and tab escaped as Python writes it
    (`\\x1b`, `\\r`): what a terminal would act on is shown instead."""
    return text.translate(_CONTROLS)


def untrusted(text: object) -> str:
    """Outside text (a device's, a user file's) for one line of rich output: control
    characters (newlines too) escaped, rich markup escaped."""
    return escape(printable(str(text)))


class SafeConsole(Console):
    """A rich Console that writes no control character it did not make itself (see the module
    docstring): every string it renders, and every segment of text it lays out, has its
    control characters escaped; a string whose markup does not parse is printed as text."""

    def render_str(self, text: str, **kwargs) -> Text:
        text = escape_controls(text)
        try:
            return super().render_str(text, **kwargs)
        except MarkupError:
            return super().render_str(text, **{**kwargs, "markup": False})

    def render(self, renderable, options=None):
        for segment in super().render(renderable, options):
            if segment.control is None and segment.text and not segment.text.isprintable() \
                    and segment.text.translate(_CONTROLS) != segment.text:
                segment = Segment(segment.text.translate(_CONTROLS), segment.style)
            yield segment


out = SafeConsole()
err = SafeConsole(stderr=True)
wide = False     # --wide: tables at their natural width, nothing wrapped or abbreviated
verbosity = 0    # -q: -1 (no progress lines), -v: 1 (each step a line, timed), -vv: 2
json_emitted = False   # a command's --json document is out: an error after it stays on stderr


def set_verbosity(level: int) -> None:
    """`-q`/`-v`: see `verbosity`. -v also lets edgekit's own loggers through (-vv: debug)."""
    global verbosity
    verbosity = level
    if level > 0:
        import logging
        logger = logging.getLogger("edgekit")
        if not any(getattr(h, "edgekit_verbose", False) for h in logger.handlers):
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("edgekit: %(name)s: %(message)s"))
            handler.edgekit_verbose = True
            logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if level > 1 else logging.INFO)


def progress(text: str, markup: bool = True) -> None:
    """One progress line on stderr (a rollout's event, a check's step); -q hides it."""
    if verbosity >= 0:
        err.print(text, highlight=False, markup=markup, soft_wrap=True)


@contextlib.contextmanager
def status(text: str):
    """A spinner on a terminal (nothing when piped), none with -q; yields `.update(text)`."""
    if verbosity < 0:
        yield _Silent()
    else:
        with err.status(text) as shown:
            yield shown


_narrow_out: SafeConsole | None = None    # the console --wide replaced, put back after


def set_wide(value: bool) -> None:
    """`--wide`: the tables are printed unabbreviated, as wide as their content; False puts
    the console back (after the command: a second command in the same process is not wide)."""
    global out, wide, _narrow_out
    if value and not wide:
        _narrow_out, wide = out, True
        out = SafeConsole(width=max(400, out.width))
    elif not value and wide:
        out, wide, _narrow_out = _narrow_out or out, False, None


def fitted_table(title: str | None, columns: list[tuple[str, str]], **kwargs) -> Table:
    """A table that fits the terminal deliberately. Each column is (header, kind): "num" never
    wraps (a cut number reads as another number), "text" folds onto more lines, "short" (names,
    ids) wraps at its own spaces and folds long words, "key" (a name typed back: a target, a
    backend) is never wrapped or cut. With --wide nothing wraps."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0),
                  **kwargs)
    for header, kind in columns:
        table.add_column(header, justify="right" if kind == "num" else "left",
                         no_wrap=kind in ("num", "key") or wide,
                         min_width=None if kind != "key" else len(header),
                         overflow="fold" if kind != "num" else "ellipsis")
    return table


def fold_at(name: str, width: int, separators: str = "/+") -> str:
    """`name` on lines of at most `width` characters, broken only after a separator (a tuned
    variant "tosa/im2col+O3+data-tiling" reads as its parts; rich would cut a word). Unchanged
    with --wide or when it fits."""
    if wide or len(name) <= width:
        return name
    lines, line, part = [], "", ""
    for ch in name + "\0":
        if ch != "\0":
            part += ch
        if ch in separators or ch == "\0":
            if line and len(line) + len(part) > width:
                lines.append(line)
                line = ""
            line += part
            part = ""
    lines.append(line)
    return "\n".join(lines)


def named(where: str) -> str:
    """A device by its registered name when it has one (user@host:port otherwise)."""
    from edgekit.config.devices import device_label
    return device_label(where)


def emit_json(data) -> None:
    global json_emitted
    json_emitted = True
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
    if m.lowering.note:
        note += f" — {m.lowering.note}"
    module = (f"module {result.bundle.module.stat().st_size:,} bytes"
              if result.bundle.module.is_file() else "no CPU module (backend none)")
    out.print(f"  lowering: {m.lowering.used}{note} ({requested_lowering(m)}); "
              f"iree {m.compiler_version}; {module}")
    if m.golden_reference:
        out.print(f"  golden outputs: {m.golden_reference}")
    for note in m.model_notes:
        out.print(f"  [yellow]model: {note}[/]")
    if m.tuning:
        t = m.tuning
        out.print(f"  tuned variant: {t.variant} (p50 {t.p50_ms:.4f} ms at {t.threads} thread(s) "
                  f"on {t.measured_on}, {t.measured_in}, {t.tuned_at}); `--no-tuned` for the "
                  "profile default")
    if m.quantization:
        quantization_summary(m.quantization)
    if m.npu:
        npu_summary(m.npu)
    if result.stage_seconds and not result.cached:
        stages = ", ".join(f"{k} {v:.2f}s" for k, v in result.stage_seconds.items())
        out.print(f"  stages: {stages}")
    if result.tar:
        out.print(f"  archive: {result.tar}")


def npu_summary(note) -> None:
    """The NPU part, as its family tells it (pipeline/npu): where ops run, what validated its
    numbers, the compiler's estimate (never a measurement: labelled so)."""
    from edgekit.api.build import npu_summary
    for line in npu_summary(note):
        out.print(f"[{line.style}]{escape(line.text)}[/]" if line.style else escape(line.text))


def requested_lowering(m) -> str:
    """What the lowering was chosen by: a tuned build lowers with the tuned variant's lowering
    although the recipe says `auto` (tuning applies to `auto` recipes only)."""
    if m.tuning:
        return f"auto; tuned variant {m.tuning.variant}"
    return f"requested {m.lowering.requested}"


def quantization_summary(q) -> None:
    c = q.contractions
    compute = (f"{c.integer} of {c.total} contractions integer"
               + (f" [yellow]({c.f32 + c.f16 + c.other} stay float: "
                  f"{', '.join(c.examples)})[/]" if c.integer < c.total else "")
               if q.mode == "int8" else
               f"{c.f16} of {c.total} contractions with f16 inputs" if q.mode == "fp16" else
               f"int8 weights, {c.total} float contractions") if c else "not checked"
    calibrated = (f", calibrated {q.calibration}" if q.calibration.startswith("before") else
                  f", calibrated on {q.calibration}" if q.calibration else "")
    out.print(f"  quantization: {q.mode}"
              + (f" ({q.weights} weights{calibrated})" if q.weights else "")
              + f"; {compute} (lowering {q.lowering})")
    from edgekit.api.build import spread_limits
    for s, wide in spread_limits(q.reference_spread):
        said = ", ".join(f"cosine ≥ {v:.5f}" if k == "min_cosine" else f"atol {v:.3g}"
                         for k, v in wide.items())
        out.print(f"  int8 tolerance of {escape(s.output)} widened to {said}: the reference "
                  f"moves half that in another summation order (cosine {s.cosine:.5f}, max "
                  f"abs {s.max_abs_error:.3g}; {escape(s.runs)})")
    if q.accuracy is None:
        out.print("  accuracy vs fp32: not measured (name the fp32 model in "
                  "`quantize.float_model`)")
        return
    out.print(f"  accuracy vs fp32 on {q.accuracy.samples} held-out samples "
              f"({q.accuracy.source}):")
    for o in q.accuracy.outputs:
        top1 = f", top-1 agreement {o.top1_agreement:.1%}" if o.top1_agreement is not None else ""
        cos = ("cosine n/a (all zero)" if o.min_cosine is None else
               f"cosine min {o.min_cosine:.6f} / mean {o.mean_cosine:.6f}")
        out.print(f"    {o.name}: {cos}, max abs error {o.max_abs_error:.3g}{top1}")


def mode_cell(mode: str) -> str:
    """A quantization mode in a narrow column: broken at its hyphen, never mid-word."""
    return mode if wide else mode.replace("-", "-\n")


def quantization_comparison(results) -> None:
    """Size, accuracy vs fp32, compute and host latency per mode (`--compare-quantization`)."""
    base = next((r for r in results if r.mode == "fp32" and r.bundle), None)
    table = fitted_table("quantization: does it pay off?", [
        ("mode", "short"), ("module B", "num"), ("size", "num"), ("min cos", "num"),
        ("max abs", "num"), ("top-1", "num"), ("compute", "short"), ("p50 ms", "num"),
        ("speed", "num")])
    for r in results:
        if not r.bundle:
            table.add_row(mode_cell(r.mode), "", "", "", "", "", f"[yellow]{r.status}[/]", "",
                          "")
            continue
        q = r.quantization
        acc = q.accuracy.outputs[0] if q and q.accuracy else None
        c = q.contractions if q else None
        compute = (" ".join(f"{n}{kind}" for n, kind in ((c.integer, "i8"), (c.f16, "f16"),
                                                         (c.f32, "f32")) if n) if c else "f32")
        speed = (f"{base.p50_ms / r.p50_ms:.2f}×" if base and base.p50_ms and r.p50_ms else "")
        table.add_row(
            mode_cell(r.mode), f"{r.size:,}", f"{r.size / base.size:.2f}×" if base else "",
            f"{acc.min_cosine:.6f}" if acc and acc.min_cosine is not None else
            "1" if not q else "n/a",
            f"{acc.max_abs_error:.3g}" if acc else "0" if not q else "n/a",
            f"{acc.top1_agreement:.1%}" if acc and acc.top1_agreement is not None else "",
            compute, f"{r.p50_ms:.4f}" if r.p50_ms else
            "[red]invalid[/]" if r.status == "invalid" else "n/a", speed)
    out.print(table)
    out.print("  size and speed against fp32; min cos, max abs and top-1: outputs against "
              "fp32's; compute: contractions by input type; p50 n/a: not runnable here",
              highlight=False)
    where = {named(r.measured_on) for r in results if r.measured_on}
    if where:
        out.print(f"  latency: 1 thread, measured on {', '.join(sorted(where))}")
    for r in results:
        out.print(f"  {r.mode}: {r.bundle.path}" + (f" ({r.status}: {r.reason})" if r.reason
                                                    else "") if r.bundle else
                  f"  {r.mode}: {r.status}: {r.reason}")


def quantization_comparison_json(results) -> list[dict]:
    return [{"mode": r.mode, "status": r.status, "reason": r.reason,
             "bundle": str(r.bundle.path) if r.bundle else None, "module_bytes": r.size,
             "p50_ms": r.p50_ms, "measured_on": r.measured_on,
             "quantization": (r.quantization.model_dump(mode="json") if r.quantization else None)}
            for r in results]


def build_json(result: BuildResult) -> dict:
    return {"bundle": str(result.bundle.path), "cached": result.cached,
            "seconds": round(result.seconds, 3), "stage_seconds": result.stage_seconds,
            "tar": str(result.tar) if result.tar else None,
            "manifest": result.bundle.manifest.model_dump(mode="json")}


def validation_table(report: ValidationReport) -> None:
    table = fitted_table(f"{report.app} on {escape(named(report.where))} ({report.target})",
                         [("output", "short"), ("shape", "num"), ("max abs err", "num"),
                          ("max rel err", "num"), ("cosine", "num"), ("top-1", "num"),
                          ("result", "text")])
    for c in report.outputs:
        top1 = "-" if c.top1_agreement is None else f"{c.top1_agreement:.0%}"
        result = "[green]ok[/]" if c.ok else "[red]FAIL[/] " + "; ".join(c.problems)
        ratio = "" if c.float32_ratio is None else f" ({c.float32_ratio:.2g}× eager f32)"
        table.add_row(c.name, "×".join(map(str, c.shape)), f"{c.max_abs_error:.3g}{ratio}",
                      f"{c.max_rel_error:.3g}",
                      "n/a" if c.cosine is None else f"{c.cosine:.6f}", top1, result)
    out.print(table)
    verdict = "[green]PASS[/]" if report.ok else "[red]FAIL[/]"
    samples = f"{report.samples} samples, worst shown; " if report.samples > 1 else ""
    out.print(f"{verdict} ({samples}{report.seconds * 1000:.1f} ms run)")


def deploy_summary(result) -> None:
    validation_table(result.report)
    moved = (f"uploaded {result.uploaded_files} file(s), {result.uploaded_bytes:,} bytes"
             if result.uploaded_files else "identical release already on the device: no payload")
    if result.copied_on_device:   # incremental: the device had these (device/deploy.py)
        moved += f"; {result.copied_on_device} file(s) the device had, copied there"
    state = (f"activated {result.release}" + (f" (was {result.previous})" if result.previous
                                              else "")
             if result.activated else f"{result.release} was already current")
    out.print(f"[green]deployed[/] {result.app} to {escape(named(result.device))}: {state}; "
              f"{moved}"
              + ("; provisioned the runtime" if result.provisioned else "")
              + f" in {result.seconds:.2f} s")
    if result.pruned:
        out.print(f"  pruned old releases: {', '.join(result.pruned)}")
    if result.variant or result.variants_skipped:   # a multi-variant bundle: which one runs
        out.print(f"  runs {'variant ' + result.variant if result.variant else 'the baseline'}"
                  + "".join(f"; skipped {escape(s)}" for s in result.variants_skipped))
    if result.npu:
        out.print(f"  npu: {escape(result.npu)}")


def deploy_json(result) -> dict:
    from dataclasses import asdict
    data = asdict(result)
    data["report"] = result.report.model_dump(mode="json")
    return data


def probe_table(device: str, info) -> None:
    table = fitted_table(escape(device), [("key", "short"), ("value", "text")],
                         show_header=False)
    from edgekit.api.devices import hwcap_features
    flags = " ".join(info.cpu_flags)
    if not flags and hwcap_features(info):    # emulated: what the kernel says, not the host
        flags = " ".join(hwcap_features(info)) + " (from AT_HWCAP)"
    rows = [("arch", info.arch), ("cpu", info.cpu_model or "-"), ("cpu part", info.cpu_part or "-"),
            ("cpu features", flags if wide else flags[:100] + ("…" if len(flags) > 100 else "")),
            ("cores", str(info.cores)), ("memory", f"{info.mem_kb // 1024} MiB"),
            ("free (.edgekit)", f"{info.free_kb // 1024} MiB"), ("os", info.os),
            ("glibc", info.glibc), ("vulkan", ", ".join(info.vulkan_devices) or "none"),
            ("npu nodes", ", ".join(info.npu_nodes) or "none"),
            ("runtimes", ", ".join(info.runtimes) or "none"),
            ("shims", ", ".join(info.shims) or "none")]
    for key, value in rows:   # the device's own words: escaped
        table.add_row(key, untrusted(value))
    out.print(table)


class _Lines:
    """A status that, with stderr not a terminal (piped, in CI), prints each new step as a line
    instead of animating nothing."""

    def __init__(self, text: str):
        self._last = ""
        self._started = time.monotonic()
        self.update(text)

    def update(self, text: str) -> None:
        if text and text != self._last:
            self._last = text
            # -v: when each step began, to see where the time goes
            at = f"[{time.monotonic() - self._started:6.1f} s] " if verbosity > 0 else ""
            err.print(f"edgekit: {at}{text}", highlight=False, soft_wrap=True)


class _Silent:
    def update(self, text: str) -> None:
        pass


def progress_mode() -> str:
    """EDGEKIT_PROGRESS: `auto` (a spinner or bar on a terminal, a line per step when stderr
    is piped), `lines`, or `none` (for scripts that parse stderr)."""
    mode = os.environ.get("EDGEKIT_PROGRESS", "auto")
    if verbosity < 0:
        return "none"
    if mode == "auto":
        mode = "live" if err.is_terminal else "lines"
    mode = mode if mode in ("lines", "none") else "live"
    return "lines" if verbosity > 0 and mode == "live" else mode


@contextlib.contextmanager
def steps(text: str):
    """The progress of a long command (see `progress_mode`). Yields an object with
    `.update(text)`."""
    mode = progress_mode()
    if mode == "live":
        with err.status(text) as status:
            yield status
    else:
        yield _Lines(text) if mode == "lines" else _Silent()


class _Count(ProgressColumn):
    """done/total, empty until a total is known (never "0/None")."""

    def render(self, task) -> Text:
        return Text("" if task.total is None else f"{task.completed:g}/{task.total:g}")


def with_progress(work):
    """Run work(progress) with a progress bar; progress(description, done, total). Piped: a
    line per new description."""
    mode = progress_mode()
    if mode != "live":
        lines = _Lines("") if mode == "lines" else _Silent()
        return work(lambda description, done, total: lines.update(
            f"{description} ({done}/{total})" if total else description))
    with Progress(TextColumn("{task.description}"), BarColumn(), _Count(), TimeElapsedColumn(),
                  console=err) as bar:
        task = bar.add_task("connecting…", total=None)

        def progress(description: str, done: int, total: int) -> None:
            bar.update(task, description=description, completed=done, total=total)
        return work(progress)


def releases_table(device: str, app: str, infos) -> None:
    """`edgekit releases`: newest first, * = current."""
    if not infos:   # a table of headers alone reads as a fault
        out.print(f"no releases of {app} on {device}")
        return
    scored = any(i.dataset for i in infos)     # a column only where a gate ever scored
    table = fitted_table(f"{app} on {device}", [("", "short"), ("release", "short"),
                                                ("target", "short"), ("created", "short")]
                         + ([("dataset score", "short")] if scored else []))
    for i in infos:
        score = [str(i.dataset) if i.dataset else "-"] if scored else []
        table.add_row("*" if i.current else "", i.release, escape(i.target),
                      escape(i.created_at), *score)
    out.print(table)


def bench_table(results, with_ids: bool = False) -> None:
    """Side by side: one row per app × threads, one column group per device."""
    devices = list(dict.fromkeys(r.device for r in results))
    rows = list(dict.fromkeys((r.app, r.config.get("threads")) for r in results))
    scored = "; dataset score" if any(r.dataset for r in results) else ""
    table = fitted_table(f"p50 / p90 / p99 ms per call (calls/s, peak RSS{scored})",
                         [("app", "short"), ("thr", "num")] + [(escape(d), "short")
                                                              for d in devices])
    latest = {(r.device, r.app, r.config.get("threads")): r for r in results}
    for app, threads in rows:
        cells = []
        for device in devices:
            r = latest.get((device, app, threads))
            if r is None:
                cells.append("-")
                continue
            mark = "" if r.reliable else " [red]unreliable[/]"
            ident = f"\n{r.id}" if with_ids else ""
            # the release's accuracy beside its speed (a checked metric name: no markup)
            ident = (f"\n{r.dataset}" if r.dataset else "") + ident
            cells.append(f"{r.latency.p50_ms:.3f} / {r.latency.p90_ms:.3f} / "
                         f"{r.latency.p99_ms:.3f}\n({r.latency.throughput_per_s:.0f}/s, "
                         f"{r.peak_rss_kb / 1024:.0f} MiB){mark}{ident}")
        table.add_row(app, str(threads), *cells)
    out.print(table)
    for r in results:
        if not r.reliable:
            out.print(f"[yellow]{untrusted(r.device)} {untrusted(r.app)} "
                      f"{untrusted(r.config.get('threads'))}t unreliable:[/] "
                      + untrusted("; ".join(r.unreliable_reasons)), highlight=False)


def score_lines(results) -> None:
    """`bench report`: each scored device × release, its dataset score beside its p50."""
    for r in results:
        out.print(f"  {untrusted(r.device)} {untrusted(r.app)} {untrusted(r.release)}: "
                  f"{r.dataset}, p50 {r.latency.p50_ms:.3f} ms", highlight=False)


def comparison_table(comparisons, title: str = "against the previous release") -> None:
    if not comparisons:
        return
    sep = " → " if wide else "\n→ "   # base over new: two short lines instead of one long
    # a column only where a dataset gate scored either release (its metric in each cell)
    scored = any(c.base_dataset or c.new_dataset for c in comparisons)
    table = fitted_table(title, [("device", "short"), ("app", "short"), ("thr", "num"),
                                 ("release", "short"), ("p50 ms", "num"), ("change", "num"),
                                 ("noise", "num"), ("verdict", "short")]
                         + ([("dataset score", "num")] if scored else []))
    cut = (lambda r: r) if wide else (lambda r: r[:8])
    for c in comparisons:
        verdict = ("[red]REGRESSION[/]" if c.regression else
                   "[green]improvement[/]" if c.improvement else "within noise")
        device = f"{c.base_device}{sep}{c.device}" if c.base_device else c.device
        score = [f"{_score(c.base_dataset)}{sep}{_score(c.new_dataset)}"] if scored else []
        table.add_row(escape(device), escape(c.app), str(c.config.get("threads")),
                      f"{cut(c.base_release)}{sep}{cut(c.new_release)}",
                      f"{c.base_p50_ms:.3f}{sep}{c.new_p50_ms:.3f}", f"{c.delta_pct:+.1f}%",
                      f"±{c.noise_pct:.1f}%", verdict, *score)
    out.print(table)


def _score(score) -> str:
    """A comparison's score cell: "top1 0.9688" (the metric is a checked plain name)."""
    return "-" if score is None else f"{score.metric} {score.measured:.4f}"


def check_table(report) -> None:
    """Per op: imports, lowers (tosa, linalg), compiles. At terminal width an op's first
    failure follows the table, one line per op (--wide: a column)."""
    mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}
    columns = [("op", "short"), ("count", "num"), ("import", "key"), ("tosa", "key"),
               ("linalg", "key"), ("compile", "key")]
    if wide:
        columns.append(("first failure", "text"))
    table = fitted_table(f"{report.model} ({report.kind}) for {report.target}", columns)
    for s in report.ops:
        row = [escape(s.op), str(s.count), mark[s.imported], mark[s.tosa], mark[s.linalg],
               mark[s.compiled]]
        if wide:
            row.append(escape(s.failure or ""))
        table.add_row(*row)
    out.print(table)
    if not wide:
        for s in report.ops:
            if s.failure:
                out.print(f"{s.op}: {s.failure}", markup=False, highlight=False)
    whole = ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in report.whole_model.items())
    if whole:
        out.print(f"whole model — {whole}")
    for stage, line in report.failures.items():
        out.print(f"whole model, {stage}: {line}", markup=False, highlight=False)
    if report.note:
        out.print(report.note)
    if report.refused:    # lowers, but a build refuses it first (the golden check)
        out.print("[red]not buildable[/]: a build refuses it before lowering: "
                  + escape(report.refused))
    elif report.chosen:
        out.print(f"[green]buildable[/]: `lowering: auto` would use {report.chosen}")
    else:
        out.print("[red]not buildable[/] for this target with any lowering")
    failing = [s for s in report.ops if s.reproducer]
    if failing:
        out.print("reproducers: " + ", ".join(f"{s.op} → {s.reproducer}" for s in failing))


def npu_check_table(report) -> None:
    """Per op of the quantized model: NPU, CPU fallback or unsupported, with the reason (at
    terminal width the reasons follow the table; --wide: a column)."""
    label = {"npu": "[green]NPU[/]", "cpu": "[yellow]CPU fallback[/]",
             "unsupported": "[red]unsupported[/]"}
    columns = [("op", "short"), ("count", "num"), ("runs on", "key"), ("MACs", "num")]
    if wide:
        columns.append(("reason", "text"))
    table = fitted_table(f"{report.model} for {report.target} ({report.accelerator})", columns)
    for r in report.ops:
        row = [escape(r.op), str(r.count), label[r.placement], f"{r.macs:,}" if r.macs else "-"]
        if wide:
            row.append(escape(r.reason))
        table.add_row(*row)
    out.print(table)
    if not wide:
        for r in report.ops:
            if r.reason and r.placement != "npu":
                out.print(f"{r.op}: {r.reason}", markup=False, highlight=False)
    share = (f"{report.npu_mac_share * 100:.1f}% of MACs on the NPU"
             if report.npu_mac_share is not None else "no MACs")
    out.print(f"{report.partitions} NPU partition(s); {share}")
    if report.cpu_check:
        out.print(f"CPU fallback module: {report.cpu_check}", markup=False, highlight=False)
    out.print("[green]buildable[/]" if report.buildable else "[red]not buildable[/]: an op runs "
              "neither on the NPU nor in the CPU fallback")


FLEET_COLOURS = {"updated": "green", "unchanged": "green", "failed": "red",
                 "rolled-back": "yellow", "rollback-failed": "red", "skipped": "dim",
                 "pending": "dim"}


def fleet_result(result) -> None:
    """The rollout, one row per device. The latency gate column is the figure the gate decided
    on: the median per-round p90 ratio (new / replaced release), its range over the rounds and
    the limit. At terminal width the reasons follow the table, one line per device, instead of
    wrapping a narrow column onto many lines (--wide: a column, with the p90s)."""
    title = (f"rollout {result.id}: {result.app} — {result.status} in {result.seconds:.1f} s")
    columns = [("wave", "num"), ("device", "short"), ("target", "short"), ("result", "short"),
               ("latency gate", "num"), ("s", "num")]
    scored = wide and any(d.dataset for d in result.devices)
    if wide:
        columns[-1:-1] = [("p90 before", "num"), ("p90 after", "num")]
        columns += [("dataset score", "short")] if scored else []
        columns.append(("reason", "text"))
    # the title is a line of its own: as a table title it wrapped mid-phrase at the width of
    # a narrow table
    out.print(escape(title), highlight=False)
    table = fitted_table(None, columns)
    for d in result.devices:
        colour = FLEET_COLOURS.get(d.status, "white")
        row = [str(d.wave), escape(d.device), escape(d.target), f"[{colour}]{d.status}[/]",
               gate_figure(d)]
        if wide:
            row += [_ms(d.p90_before_ms), _ms(d.p90_after_ms)]
        row.append(f"{d.seconds:.1f}")
        if scored:
            row.append(str(d.dataset) if d.dataset else "-")
        if wide:
            row.append(escape(d.reason))
        table.add_row(*row)
    out.print(table)
    # the dataset gate's score per release (per device: --wide, the HTML report)
    from edgekit.models.dataset import scores_line
    for release, scores in result.release_scores().items():
        out.print(f"  dataset score of {escape(release)}: {scores_line(scores)}",
                  highlight=False)
    if any(d.p90_ratio is not None for d in result.devices):
        out.print("  latency gate: the median over the rounds of new p90 / replaced release's "
                  "p90, \\[its range], against the limit", highlight=False)
    if not wide:
        for d in result.devices:
            if d.reason:
                out.print(f"  {escape(d.device)}: {escape(d.reason)}", highlight=False)
    for w in result.waves:
        state = "[red]halted[/]" if w.halted else "[green]passed[/]" if w.complete \
            else "[yellow]incomplete[/]"
        out.print(f"wave {w.index}: {len(w.devices)} device(s), {w.updated} updated, "
                  f"{w.unchanged} unchanged, {w.failed} failed (allowed {w.allowed_failures})"
                  f" — {state} in {w.seconds:.1f} s")
    if result.halt_reason:
        out.print(f"[red]halt[/]: {escape(result.halt_reason)}; rollback: {result.rolled_back}")


def gate_figure(d) -> str:
    """×ratio [low–high] ≤/> ×limit, or "-" when no gate ran."""
    if d.p90_ratio is None:
        return "-"
    spread = (f" [{d.p90_ratio_range[0]:.2f}–{d.p90_ratio_range[1]:.2f}]"
              if d.p90_ratio_range else "")
    verdict = (">" if d.p90_ratio_limit and d.p90_ratio > d.p90_ratio_limit else "≤")
    limit = f" {verdict} ×{d.p90_ratio_limit:g}" if d.p90_ratio_limit else ""
    return escape(f"×{d.p90_ratio:.2f}{spread}{limit}")


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f} ms"


def fleet_status_table(app: str, rows: list[FleetDeviceStatus]) -> None:
    """At terminal width: devices by name, releases by their first 8 characters, times to the
    minute, and why a device is unreachable below the table (--wide: addresses and everything
    whole)."""
    cut = (lambda r: r) if wide else (lambda r: r[:8])
    columns = [("device", "short"), ("target", "short"), ("current", "short"),
               ("built for", "short"), ("runtime", "short"), ("last validation", "short")]
    if wide:
        columns.insert(1, ("address", "short"))
    table = fitted_table(f"fleet status: {app}", columns)
    notes = []
    for r in rows:
        lead = [escape(r.device)] + ([escape(r.address)] if wide else []) + [escape(r.target)]
        if not r.reachable:
            table.add_row(*lead, "[red]unreachable[/]", "", "", "")
            notes.append(f"  {untrusted(r.device)} ({untrusted(r.address)}): "
                         f"{untrusted(r.error)}")
            continue
        v = r.last_validation
        at = "" if v is None else v.at if wide else v.at[:16].replace("T", " ")
        checked = "-" if v is None else \
            f"{'[green]ok[/]' if v.ok else '[red]rejected[/]'} {cut(v.release)} {at}" + \
            (f" {escape(v.dataset)}" if v.dataset else "")
        if r.error:   # reachable, but what it answered was refused: the row says so
            checked = "[red]refused answer[/]"
            notes.append(f"  {untrusted(r.device)} ({untrusted(r.address)}): "
                         f"{untrusted(r.error)}")
        table.add_row(*lead, untrusted(cut(r.current)) if r.current else "-",
                      untrusted(r.built_for or "-"), untrusted(r.runtime or "-"), checked)
    out.print(table)
    for line in notes:
        out.print(line, highlight=False)


def channel_status(st, as_json: bool) -> None:
    """A release channel's index and its devices' reports (edgekit.api.channel.status)."""
    import dataclasses
    if as_json:
        emit_json({"index": dataclasses.asdict(st.index) if st.index else None,
                   "failed": st.failed, "tried": st.tried,
                   "reports": [dataclasses.asdict(r) for r in st.reports]})
        return
    if st.index:
        i = st.index
        out.print(f"{escape(i.channel)}: release {i.release} of {escape(i.app)} at "
                  f"{i.percent}% (steps {','.join(map(str, i.steps))}), max-fail "
                  f"{i.max_fail}{' [red]paused[/]' if i.paused else ''}; "
                  f"{st.failed} of {st.tried} device(s) that tried it failed")
    colour = {"failed": "red", "refused": "red", "unreadable": "red", "interrupted": "yellow",
              "waiting": "yellow", "paused": "yellow"}
    for r in st.reports:
        what = r.problem or r.detail
        out.print(f"  [{colour.get(r.state, 'green')}]{r.state}[/] {escape(r.device)} current "
                  f"{r.current or '-'} {escape(what)}")
    if not st.reports:
        out.print("  no device has reported yet")
