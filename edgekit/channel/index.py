"""A release channel's index: one signed text file naming the release, its files by sha256 and
the rollout policy. Line-based (`key value`) so that a device reads it with sed, no JSON.

    edgekit-channel 1
    channel NAME            the channel this index is for (a device refuses another's)
    serial N                raised by every rewrite; a device refuses an older index than the
                            newest it accepted (no replay of a stale, validly signed index)
    app NAME
    percent P               0-100: a device updates when its bucket is under P*100
    seed HEX                with the device id and its release, picks the device's bucket
    steps 10,50,100         the promotion plan (`channel promote` walks it)
    max_fail N|P%           failures past this pause the channel (promote)
    paused 0|1
    release ARCH ID CREATED the release for devices of one arch (uname -m): a channel holds
                            one per arch, so one channel serves a mixed fleet
    file ARCH SHA256 SIZE PATH  one per payload file of that arch's release (channel/
                            payload.py); the content lies at blobs/SHA256 beside the channel

Layout of `--channel DIR/NAME`: DIR/NAME/index, DIR/NAME/index.sig, DIR/NAME/status/ (the
devices' reports, PUT there), DIR/blobs/<sha256> (shared by every channel in DIR: a file two
releases or two channels share is stored and fetched once).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace

from edgekit.config.address import NAME
from edgekit.errors import ConfigError

FORMAT = "edgekit-channel 1"
INDEX = "index"
INDEX_SIG = "index.sig"
STATUS = "status"
BLOBS = "blobs"
BUCKETS = 10000          # the bucket is a number in [0, 10000): percent with two decimals
SHA = re.compile(r"[0-9a-f]{64}")
PATH = re.compile(rf"{NAME.pattern}(/{NAME.pattern})?")     # a bundle file: name or dir/name


@dataclass(frozen=True)
class ChannelFile:
    sha256: str
    size: int
    path: str


@dataclass(frozen=True)
class Release:
    arch: str
    release: str
    created: str
    files: tuple[ChannelFile, ...]


@dataclass(frozen=True)
class Index:
    channel: str
    serial: int
    app: str
    percent: int
    seed: str
    steps: tuple[int, ...]
    max_fail: str
    paused: bool
    releases: tuple[Release, ...] = field(default=())

    def render(self) -> str:
        lines = [FORMAT, f"channel {self.channel}", f"serial {self.serial}", f"app {self.app}",
                 f"percent {self.percent}", f"seed {self.seed}",
                 f"steps {','.join(map(str, self.steps))}", f"max_fail {self.max_fail}",
                 f"paused {int(self.paused)}"]
        for r in self.releases:
            lines.append(f"release {r.arch} {r.release} {r.created}")
            lines += [f"file {r.arch} {f.sha256} {f.size} {f.path}" for f in r.files]
        return "\n".join(lines) + "\n"

    def bumped(self, **changes) -> "Index":
        return replace(self, serial=self.serial + 1, **changes)

    def for_arch(self, arch: str) -> Release | None:
        return next((r for r in self.releases if r.arch == arch), None)

    @property
    def release_ids(self) -> frozenset[str]:
        return frozenset(r.release for r in self.releases)

    @property
    def release(self) -> str:
        """The release ids, one per arch (comma-separated when several)."""
        return ",".join(r.release for r in self.releases)

    @property
    def files(self) -> tuple[ChannelFile, ...]:
        return tuple(f for r in self.releases for f in r.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


ARCH = re.compile(r"[A-Za-z0-9_]{1,32}")


def parse_index(text: str, where: str) -> Index:
    """An index as `render` writes it (ConfigError naming the line otherwise)."""
    lines = text.splitlines()
    if not lines or lines[0] != FORMAT:
        raise ConfigError(f"not an edgekit channel index (first line {lines[:1]})", where=where)
    values: dict[str, str] = {}
    releases: dict[str, list] = {}
    for n, line in enumerate(lines[1:], 2):
        key, _, value = line.partition(" ")
        parts = value.split(" ")
        if key == "release":
            if len(parts) != 3 or not ARCH.fullmatch(parts[0]) or parts[0] in releases \
                    or not NAME.fullmatch(parts[1]):
                raise ConfigError(f"line {n}: a malformed release entry", where=where)
            releases[parts[0]] = [parts[1], parts[2], []]
        elif key == "file":
            if len(parts) != 4 or parts[0] not in releases or not SHA.fullmatch(parts[1]) \
                    or not parts[2].isdigit() or not PATH.fullmatch(parts[3]):
                raise ConfigError(f"line {n}: a malformed file entry", where=where)
            releases[parts[0]][2].append(ChannelFile(parts[1], int(parts[2]), parts[3]))
        elif key in values or not value:
            raise ConfigError(f"line {n}: '{key}' repeated or empty", where=where)
        else:
            values[key] = value
    try:
        return Index(channel=values["channel"], serial=int(values["serial"]),
                     app=values["app"], percent=int(values["percent"]), seed=values["seed"],
                     steps=tuple(int(s) for s in values["steps"].split(",")),
                     max_fail=values["max_fail"], paused=values["paused"] == "1",
                     releases=tuple(Release(arch, r, c, tuple(f))
                                    for arch, (r, c, f) in releases.items()))
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"a missing or malformed entry ({exc})", where=where) from None


def bucket(seed: str, device: str, release: str) -> int:
    """The device's stable bucket for a release, in [0, BUCKETS): agent.sh computes the same
    (the first 8 hex digits of sha256("SEED:DEVICE:RELEASE"), modulo BUCKETS)."""
    digest = hashlib.sha256(f"{seed}:{device}:{release}".encode()).hexdigest()
    return int(digest[:8], 16) % BUCKETS


def in_rollout(index: Index, device: str, arch: str) -> bool:
    mine = index.for_arch(arch)
    return mine is not None and \
        bucket(index.seed, device, mine.release) < index.percent * (BUCKETS // 100)


def parse_percents(text: str) -> tuple[int, ...]:
    """'10,50,100' → (10, 50, 100): rising, each 1-100."""
    try:
        steps = tuple(int(p.strip().rstrip("%")) for p in text.split(","))
    except ValueError:
        raise ConfigError(f"--percent takes numbers 1-100 separated by commas, not {text!r}",
                          key="percent") from None
    if not steps or any(not 0 < p <= 100 for p in steps) or list(steps) != sorted(set(steps)):
        raise ConfigError(f"--percent steps must rise within 1-100 (got {text!r})",
                          key="percent")
    return steps


def parse_max_fail(text: str) -> str:
    """'5%' or '2' (devices), as the index keeps it."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?%", text) and float(text[:-1]) <= 100:
        return text
    if text.isdigit():
        return text
    raise ConfigError(f"--max-fail is a count of devices or a percentage like 5%, not {text!r}",
                      key="max-fail")


def over_limit(max_fail: str, failed: int, tried: int) -> bool:
    """Whether `failed` of `tried` devices exceed `max_fail`."""
    if max_fail.endswith("%"):
        return tried > 0 and failed * 100 > float(max_fail[:-1]) * tried
    return failed > int(max_fail)
