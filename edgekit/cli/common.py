"""What every command shares: error handling (an exception → its message and its class's exit
code, as JSON under --json), Ctrl-C's one line about the device, and the common options.

Exit codes come from the class of the error a command raised (edgekit.errors, listed in
README.md's "Exit codes"); no command exits with a number of its own.
"""

from __future__ import annotations

import datetime
import functools
import os
import sys
import traceback
import warnings
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.errors import EdgekitError, Interrupted, LoweringError


def handle_errors(fn):
    """Turn a command's exception into a message and the exit code of its class.

    An edgekit error is its message (what, where, hint). Any other exception is a bug or an
    unforeseen environment: one line, with the traceback written to a log file. `--debug` (or
    EDGEKIT_DEBUG=1) prints the traceback in both cases. Under `--json` the error is a JSON
    object on stdout ({"error", "exit", "hint", "kind"}) unless the command already wrote its
    document there (a verdict on it, like validate's exit 8, stays on stderr).
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _changing_nothing()
        render.json_emitted = False
        as_json = bool(kwargs.get("as_json"))
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        try:
            return fn(*args, **kwargs)
        except EdgekitError as exc:
            _report_error(exc, as_json)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            # before click's "Aborted!" (exit 1): one line, the shell's 130
            exc = interrupted(_device_step, _command_path())
            if as_json and not render.json_emitted:
                render.emit_json(error_json(exc))
            else:
                render.err.print("[red]interrupted:[/] " + escape(str(exc)), highlight=False,
                                 soft_wrap=True)
            sys.exit(exc.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors, --help, a declined confirm
        except Exception as exc:
            _report_unexpected(exc, as_json)
            sys.exit(EdgekitError.exit_code)  # "other error"
        finally:
            render.set_wide(False)
    return wrapper


def error_json(exc: EdgekitError) -> dict:
    """An error as --json shows it (EdgekitError.as_json), with a failed validation's report
    and a failed lowering's reproducer."""
    data = exc.as_json()
    report = getattr(exc, "report", None)
    if report is not None and hasattr(report, "model_dump"):
        data["report"] = report.model_dump(mode="json")
    if isinstance(exc, LoweringError) and exc.reproducer:
        data["reproducer"] = exc.reproducer
    return data


def _report_error(exc: EdgekitError, as_json: bool) -> None:
    if as_json and not render.json_emitted:
        render.emit_json(error_json(exc))
    else:
        render.err.print("[red]error:[/] " + escape(str(exc)), highlight=False, soft_wrap=True)
        if isinstance(exc, LoweringError) and exc.reproducer:
            render.err.print(f"  reproducer: {escape(exc.reproducer)}", highlight=False)
    if debug():
        _print_traceback(exc)


# Commands that change no device, or that say when they start to (`changing`): Ctrl-C in
# them says "nothing was changed on a device" unless a changing step was in flight.
NOTHING_CHANGED_UNLESS_SAID = frozenset({
    "build", "validate", "check", "schema", "targets list", "targets show", "targets derive",
    "probe", "releases", "devices list", "devices trust", "lab status", "bench compare",
    "bench history", "bench report", "completion", "toolchains list", "toolchains install",
    "deploy", "rollback", "provision"})
# The step that changes a device while it runs, and how to see what it left: Ctrl-C's line.
_device_step: tuple[str, str] | None = None
SWITCH_HINT = ("a release becomes current in one atomic rename: the device runs the release it "
               "ran before or the new one; `edgekit releases HOST --app APP` shows which")


def changing(step: str, hint: str = SWITCH_HINT) -> None:
    """From now on a Ctrl-C stops `step`, which changes a device (`hint`: how to see what it
    left); the api functions call this back as `on_change(step, hint)`."""
    global _device_step
    _device_step = (step, hint)


def _changing_nothing() -> None:
    global _device_step
    _device_step = None


def interrupted(step: tuple[str, str] | None, command: str) -> Interrupted:
    """What Ctrl-C stopped, as far as this process knows: `step` (what, hint) changes a device
    (None: none had started), `command` the subcommand's path ("deploy", "fleet update")."""
    if step is not None:
        return Interrupted(f"{step[0]} was in flight", hint=step[1])
    if command in NOTHING_CHANGED_UNLESS_SAID:
        return Interrupted("nothing was changed on a device")
    return Interrupted(f"`edgekit {command}` may have been changing a device",
                       hint="`edgekit releases HOST --app APP` shows what is current there")


def _command_path() -> str:
    ctx = click.get_current_context(silent=True)
    return ctx.command_path.partition(" ")[2] if ctx else ""


def debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug"))


def _print_traceback(exc: BaseException) -> None:
    sys.stderr.write("".join(traceback.format_exception(exc)))


def _report_unexpected(exc: Exception, as_json: bool = False) -> None:
    kind = type(exc).__qualname__ if type(exc).__module__ == "builtins" else \
        f"{type(exc).__module__}.{type(exc).__qualname__}"
    lines = str(exc).strip().splitlines()
    message = kind + (f": {lines[0]}" if lines else "")
    show_traceback, note, hint = debug(), None, None
    if not show_traceback:
        try:
            log = _write_traceback_log(exc)
            note = f"traceback: {log}\n  rerun with --debug for the traceback"
            hint = f"the traceback is in {log}; rerun with --debug to print it"
        except OSError as log_exc:
            note, show_traceback = f"(no log file: {log_exc}; the traceback follows)", True
            hint = f"no log file ({log_exc}): the traceback is on stderr"
    if as_json and not render.json_emitted:
        render.emit_json({"error": message, "exit": EdgekitError.exit_code, "hint": hint,
                          "kind": type(exc).__name__})
    else:
        render.err.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        if note:
            render.err.print(f"  {escape(note)}", highlight=False, soft_wrap=True)
    if show_traceback:
        _print_traceback(exc)


def _write_traceback_log(exc: Exception) -> Path:
    from edgekit.config.paths import logs_dir
    now = datetime.datetime.now()
    path = logs_dir() / f"edgekit-{now:%Y%m%d-%H%M%S}-{os.getpid()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"{now.isoformat(timespec='seconds')}: {' '.join(sys.argv)}\nPython {sys.version}\n\n"
    path.write_text(head + "".join(traceback.format_exception(exc)))
    return path


def examples(*lines: str) -> str:
    """A command's "Examples:" section (its --help epilog): one command a line, kept as
    written (click's \\b), each short enough for 80 columns."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def connecting(host: str):
    """The "connecting to HOST…" step, after the name is known to be a device: an unknown
    name's error is the only line, not a progress line that pretends to connect."""
    from edgekit.config.address import local_root
    from edgekit.config.devices import lookup_device
    if local_root(host) is None:
        lookup_device(host)
    return render.steps(f"connecting to {escape(host)}…")


def say_skipped(notes: list[str]) -> None:
    """Stored results that could not be used, one line each on stderr (the view goes on)."""
    for note in notes:
        render.err.print(f"edgekit: {render.untrusted(note)}", highlight=False)


JSON = click.option("--json", "as_json", is_flag=True,
                    help="machine-readable output (errors too: {error, exit, hint})")
TRUST_PICKLE = click.option("--trust-pickle", is_flag=True,
                            help="load a .pt2 model although torch.export.load unpickles it "
                                 "(it can run code): only for files you made or trust")
IDENTITY = click.option("--identity", type=click.Path(path_type=Path),
                        help="private key [default: the registered device's, else ~/.ssh/id_*]")
HOST_HELP = "device: a registered name (e.g. lab-aarch64-1) or user@host[:port]"
WIDE = click.option("--wide", is_flag=True, expose_value=False, is_eager=True,
                    callback=lambda ctx, param, value: render.set_wide(value),
                    help="tables at their natural width, nothing wrapped or abbreviated")
ALLOW_UNSIGNED = click.option(
    "--allow-unsigned", is_flag=True,
    help="deploy even if the bundle is unsigned or its signer is not in allowed_signers "
         "(recorded in the device's journal)")
