"""Command blocks of README.md and docs/: which are marked runnable, and the `edgekit` command
lines printed anywhere in them (for tests/unit/test_docs.py and tests/device/test_readme_tour.py).

A block is runnable when the line before its opening fence is `<!-- runnable -->`: each of its
lines is a shell command a user types as printed (a trailing `# comment` included).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
RUNNABLE = "<!-- runnable -->"
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
# languages whose blocks hold no shell commands (an `edgekit` in them is a comment or output)
NOT_SHELL = {"yaml", "yml", "python", "py", "json", "text", "toml", "ini"}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int               # of the opening fence, 1-based
    language: str
    lines: tuple[str, ...]
    runnable: bool

    def commands(self) -> list[str]:
        """The block's commands: continuation lines (`\\`) joined, blank lines left out."""
        out: list[str] = []
        pending = ""
        for line in self.lines:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                out.append(command)
        return out


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match.groups()
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence)),
                   len(lines))
        found.append(Block(path, i + 1, language.lower(), tuple(lines[i + 1:end]),
                           before == RUNNABLE))
        i = end + 1
    return found


def runnable_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.runnable]


INVOCATION = re.compile(r"(?:^|&&|;|\|\||\$\()\s*(edgekit(?:\s[^;&|)]*)?)")


def edgekit_invocations(block: Block) -> list[list[str]]:
    """The arguments of every `edgekit …` the block's shell lines run (a console block's
    `$ ` prompt stripped; output lines are not commands)."""
    if block.language in NOT_SHELL:
        return []
    found = []
    for command in block.commands():
        if block.language == "console":
            if not command.startswith("$ "):
                continue
            command = command[2:]
        for match in INVOCATION.finditer(command):
            tokens = shlex.split(match[1], comments=True)
            found.append(tokens[1:])
    return found


BOARD_ADDRESS = re.compile(r"\b[a-z_][a-z0-9_-]*@192\.0\.2\.\d{1,3}(?::\d+)?\b")


def substitute_board_addresses(command: str, device: str) -> str:
    """The docs' boards are at documentation addresses (192.0.2.0/24, RFC 5737); a test runs
    the command on a lab device instead. Nothing else in a command is changed."""
    return BOARD_ADDRESS.sub(device, command)
