"""Text a device sends (probe facts, journal-derived fleet rows, bench reasons, validation
problems, error messages) never reaches the terminal raw and never crashes rendering: the
render layer's consoles escape control characters and survive markup that does not parse
(`[/]`), and `untrusted()` escapes both where a command builds a line (issue 36, item 2).
A property test feeds hostile strings through every renderer that shows device text."""

import io
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.markup import escape

from edgekit.cli import render
from edgekit.device.probe import parse_probe
from edgekit.errors import DeviceAnswerRefused, HealthGateFailed
from edgekit.models.fleet import FleetDeviceStatus, LastValidation
from edgekit.models.report import OutputComparison, ValidationReport

RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")   # what a terminal acts on (not \n, \t)

HOSTILE = ["[/]", "[bold]x[/bold]", "\x1b[2J", "\x1b]0;pwned\x07", "\r", "\x9b31m", "[link=x]",
           "[/red]", "\\[", "\x00", "\u202e", "x" * 300]


@pytest.fixture
def terminal(monkeypatch):
    """render.out and render.err as an 80-column terminal (SafeConsole, no colours: any ESC
    in the output came from the text); returns a function giving what was printed."""
    buffers = [io.StringIO(), io.StringIO()]
    monkeypatch.setattr(render, "out", render.SafeConsole(file=buffers[0], width=80,
                                                          color_system=None))
    monkeypatch.setattr(render, "err", render.SafeConsole(file=buffers[1], width=80,
                                                          color_system=None))
    monkeypatch.setattr(render, "wide", False)
    return lambda: buffers[0].getvalue() + buffers[1].getvalue()


def render_everything(text: str) -> None:
    """Every renderer that shows device text, with `text` wherever a device's words go."""
    info = parse_probe(f"arch=x86_64\nkernel={text}\nos={text}\nvulkan_device={text}\n"
                       f"cpu_model={text}\nglibc={text}\n")
    render.probe_table(f"local:{text}", info)
    rows = [FleetDeviceStatus(device="d1", address=f"local:{text}", target="host",
                              reachable=True, current=text[:64] or "x", built_for=text,
                              runtime=text, last_validation=LastValidation(
                                  release=text or "x", ok=False, at="2026-01-01T00:00:00")),
            FleetDeviceStatus(device="d2", address="local:/d2", target="host",
                              reachable=True, error=f"DeviceAnswerRefused: {text}"),
            FleetDeviceStatus(device="d3", address="local:/d3", target="host",
                              error=f"DeviceUnreachable: {text}")]
    render.fleet_status_table("app", rows)
    report = ValidationReport(app="app", target="host", where=f"local:{text}", ok=False,
                              seconds=0.1, outputs=(OutputComparison(
                                  name=text or "out", shape=(1,), max_abs_error=1.0,
                                  max_rel_error=1.0, ok=False,
                                  problems=(f"iree-run-module failed on the device: {text}",)),))
    render.validation_table(report)
    for exc in (DeviceAnswerRefused(f"journal: {text}", where=f"local:{text}"),
                HealthGateFailed(f"the health hook exited with 1 ({text})", where="d1")):
        # as cli.main prints an error
        render.err.print("[red]error:[/] " + escape(str(exc)), highlight=False, soft_wrap=True)
    render.out.print(f"[yellow]d1 app 1t unreliable:[/] {render.untrusted(text)}")
    render.out.print(f"a line someone forgot to escape: {text}")   # the console's own net


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_device_text_is_rendered_escaped_by_every_renderer(terminal, text):
    render_everything(text)
    shown = terminal()
    assert not RAW.search(shown), repr(shown)


def test_escape_sequences_are_shown_as_text_and_markup_as_written(terminal):
    render.probe_table("dev", parse_probe("arch=x86_64\nos=6.1 \x1b[31m[/]red\n"))
    shown = terminal()
    assert "6.1 \\x1b[31m[/]red" in shown


def test_a_device_string_with_a_closing_tag_does_not_crash_a_forgotten_line(terminal):
    render.out.print("[red]error:[/] device said [/] and \x1b[2J")
    assert "device said [/] and \\x1b[2J" in terminal()


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20)), max_size=6)
       .map("".join))
def test_any_device_text_renders_without_a_raw_control_character_or_a_crash(terminal, text):
    render_everything(text)
    assert not RAW.search(terminal())
