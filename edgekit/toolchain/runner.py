"""The one place edgekit runs external tools.

A failure becomes a ToolError with argv, exit code, the tail of stderr and a hint. Set
EDGEKIT_KEEP_TEMPS=1 to keep the scratch directories tools work in (printed on failure), so a
reproducer can be run by hand.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from edgekit.errors import ToolError


def keep_temps() -> bool:
    return os.environ.get("EDGEKIT_KEEP_TEMPS", "") not in ("", "0")


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory, removed afterwards unless EDGEKIT_KEEP_TEMPS is set."""
    path = Path(tempfile.mkdtemp(prefix=f"edgekit-{prefix}-"))
    try:
        yield path
    finally:
        if not keep_temps():
            shutil.rmtree(path, ignore_errors=True)


def run_tool(argv: Sequence[str], *, what: str, hint: str | None = None,
             timeout: float = 1800, env: dict[str, str] | None = None,
             input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` (with `input` on its stdin); raise ToolError (never a bare subprocess
    error) when it fails."""
    argv = [str(a) for a in argv]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, input=input,
                              env={**os.environ, **(env or {})})
    except FileNotFoundError:
        raise ToolError(f"{what}: program not found", argv=argv, returncode=127,
                        stderr_tail="", hint=hint) from None
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{what}: timed out after {timeout:.0f} s", argv=argv, returncode=124,
                        stderr_tail=(exc.stderr or b"").decode(errors="replace")[-4000:],
                        hint=hint) from None
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace") or proc.stdout.decode(errors="replace")
        raise ToolError(what, argv=argv, returncode=proc.returncode,
                        stderr_tail=stderr[-4000:], hint=hint)
    return proc
