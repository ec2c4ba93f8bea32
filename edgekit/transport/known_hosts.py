"""Pinned host keys, read once per process and looked up by name.

paramiko's `HostKeys` checks every new line against every earlier one while loading and scans
the whole list on each lookup: 0.36 s to load 1,000 pinned keys, 61 s for 10,000 — per
connection, since `SSHClient.load_host_keys` re-read the file every time. A fleet of 10,000
devices never finished. Here the file is parsed in one linear pass into a dict from host name
to its (key type, base64) lines, kept until the file changes (config/stamped.py: one `stat`
per lookup), so a connection costs the same with one pinned key or ten thousand.

Lines are OpenSSH's (`names keytype base64 [comment]`). Hashed names (`|1|salt|hash`, written
by `ssh-keygen -H`, never by edgekit) cannot be indexed by name: they are kept aside and
matched one by one, as OpenSSH does. This module only parses text; ssh.py turns the lines it
returns into paramiko keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from edgekit.config.stamped import StampedCache

Entry = tuple[str, str]          # (key type, base64 blob)


@dataclass(frozen=True)
class PinnedKeys:
    """One parse of a known_hosts file."""

    by_name: dict[str, tuple[Entry, ...]] = field(default_factory=dict)
    hashed: tuple[tuple[str, Entry], ...] = ()    # (|1|salt|hash, entry)

    def lookup(self, name: str) -> tuple[Entry, ...]:
        """Every key pinned for `name` (OpenSSH's known_hosts name: `host` or `[host]:port`)."""
        found = self.by_name.get(name, ())
        if self.hashed:
            found += tuple(entry for hashed, entry in self.hashed
                           if _hashed_matches(hashed, name))
        return found


def parse(text: str) -> PinnedKeys:
    """One linear pass; a malformed or marker (`@revoked`, `@cert-authority`) line is skipped,
    as paramiko skips it."""
    by_name: dict[str, list[Entry]] = {}
    hashed: list[tuple[str, Entry]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        names, entry = fields[0], (fields[1], fields[2])
        for name in names.split(","):
            if name.startswith("|1|"):
                hashed.append((name, entry))
            elif entry not in by_name.setdefault(name, []):
                by_name[name].append(entry)
    return PinnedKeys({name: tuple(entries) for name, entries in by_name.items()},
                      tuple(hashed))


def _without(line: str, name: str) -> str:
    """`line` with `name` taken out of its host names (the whole line when it was the only
    one); other lines as they are."""
    fields = line.split(maxsplit=1)
    names = fields[0].split(",") if fields and not fields[0].startswith("#") else []
    if name not in names:
        return line
    rest = [n for n in names if n != name]
    return f"{','.join(rest)} {fields[1]}" if rest and len(fields) > 1 else ""


def _hashed_matches(hashed: str, name: str) -> bool:
    try:
        _, _, salt, digest = hashed.split("|")
        mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(mac, base64.b64decode(digest))
    except ValueError:        # not |1|salt|hash: matches nothing
        return False


_pinned = StampedCache(lambda path: parse(path.read_text(encoding="utf-8", errors="replace")),
                       keep=16)
_lock = threading.Lock()     # one writer at a time in this process (pin_line)


def pinned(path: Path) -> PinnedKeys:
    """The keys pinned in `path`, parsed once and again only after the file changed."""
    try:
        return _pinned.get(path)
    except FileNotFoundError:
        return PinnedKeys()


def pin_line(path: Path, name: str, key_type: str, key_base64: str, *,
             replace: bool = False) -> None:
    """Record `name`'s key: appended (linear in nothing but this line) or, with `replace`,
    the file rewritten without `name`'s earlier keys. Written to a temporary file and renamed
    over the old one, so a reader never sees half a file."""
    # one writer at a time, across threads and processes (`lab up --count 8` pins in parallel)
    with _lock, FileLock(path.with_name(f".{path.name}.lock"), fallback_to_soft=False):
        _pin_locked(path, name, key_type, key_base64, replace)


def _pin_locked(path: Path, name: str, key_type: str, key_base64: str, replace: bool) -> None:
    entry = f"{name} {key_type} {key_base64}\n"
    old = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    if replace:
        old = "".join(_without(line, name) for line in old.splitlines(keepends=True))
    elif (key_type, key_base64) in parse(old).lookup(name):
        return
    if old and not old.endswith("\n"):
        old += "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(old + entry, encoding="utf-8")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
