"""Fixtures shared by the unit tests of the CLI's output."""

import io

import pytest
from rich.console import Console

from edgekit.cli import render


@pytest.fixture
def narrow(monkeypatch):
    """render.out as an 80-column terminal; returns what was printed."""
    buffer = io.StringIO()
    monkeypatch.setattr(render, "out", Console(file=buffer, width=80, color_system=None))
    monkeypatch.setattr(render, "wide", False)
    return buffer
