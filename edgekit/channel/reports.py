"""The devices' status reports on a channel (`status/<device>.json`, PUT by agent.sh), read
from the channel's folder or over HTTP. A report comes from a device and anyone who can PUT:
it is untrusted — bounded in size and count, parsed strictly, every field type-checked and
sanitised; a report that is not one is listed as unreadable, never raised from."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from edgekit.channel.index import NAME, STATUS
from edgekit.device.answers import ascii_int
from edgekit.errors import ConfigError, DeviceUnreachable

REPORT_MAX = 4096              # bytes of one report
REPORTS_MAX = 100_000          # reports read per channel
LISTING_MAX = 16 * 1024 * 1024
STATES = ("updated", "current", "waiting", "paused", "failed", "refused", "interrupted")
RELEASE = re.compile(r"[0-9a-f]{16}|")
DETAIL = re.compile(r"[^A-Za-z0-9 ._:;,/()=+%@`<>*|-]")


@dataclass(frozen=True)
class DeviceReport:
    device: str
    channel: str
    app: str
    release: str           # the channel's release the device saw
    current: str           # what runs on the device
    state: str
    detail: str
    serial: int
    bytes: int
    ts: int
    problem: str = ""      # why the report was not readable (then the other fields are empty)


def parse_report(name: str, data: bytes) -> DeviceReport:
    """A report's bytes → DeviceReport; `name` is its file name (<device>.json)."""
    device = name.removesuffix(".json")

    def bad(why: str) -> DeviceReport:
        return DeviceReport(device=device if NAME.fullmatch(device) else "?", channel="",
                            app="", release="", current="", state="unreadable", detail="",
                            serial=0, bytes=0, ts=0, problem=why)
    if len(data) > REPORT_MAX:
        return bad(f"larger than {REPORT_MAX} bytes")
    try:
        raw = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return bad("not ASCII JSON")
    if not isinstance(raw, dict):
        return bad("not a JSON object")
    text = {k: raw.get(k) for k in ("device", "channel", "app", "release", "current", "state",
                                     "detail")}
    if not all(isinstance(v, str) for v in text.values()):
        return bad("a field is missing or not text")
    if text["device"] != device or not NAME.fullmatch(device):
        return bad(f"its device {text['device'][:64]!r} is not its file's name")
    if text["state"] not in STATES:
        return bad(f"unknown state {text['state'][:32]!r}")
    for key in ("release", "current"):
        if not RELEASE.fullmatch(text[key]):
            return bad(f"{key} is not a release id")
    for key in ("channel", "app"):
        if text[key] and not NAME.fullmatch(text[key]):
            return bad(f"{key} is not a plain name")
    numbers = {}
    for key, limit in (("serial", 2 ** 53), ("bytes", 2 ** 53), ("ts", 2 ** 40)):
        value = raw.get(key)
        numbers[key] = ascii_int(str(value), limit) if isinstance(value, int) and \
            not isinstance(value, bool) else None
        if numbers[key] is None:
            return bad(f"{key} is not a whole number in range")
    return DeviceReport(device=device, channel=text["channel"], app=text["app"],
                        release=text["release"], current=text["current"], state=text["state"],
                        detail=DETAIL.sub("?", text["detail"])[:300], **numbers)


def read_reports(source: Path | str) -> list[DeviceReport]:
    """Every report of the channel at `source`: its folder (DIR/NAME), or its URL (the server
    must list status/: nginx's autoindex, HTML or JSON)."""
    text = str(source)
    if text.startswith(("http://", "https://")):
        return _from_url(text.rstrip("/"))
    folder = Path(source) / STATUS
    if not Path(source).is_dir():
        raise ConfigError(f"no channel folder {source}", key="channel")
    names = sorted(p.name for p in folder.glob("*.json"))[:REPORTS_MAX] \
        if folder.is_dir() else []
    reports = []
    for name in names:
        path = folder / name
        if path.is_symlink() or not path.is_file():
            continue
        with path.open("rb") as f:
            reports.append(parse_report(name, f.read(REPORT_MAX + 1)))
    return reports


def _get(url: str, limit: int) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:   # noqa: S310 (http(s) only)
        return response.read(limit + 1)


def _from_url(url: str) -> list[DeviceReport]:
    listing_url = f"{url}/{STATUS}/"
    try:
        listing = _get(listing_url, LISTING_MAX).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise DeviceUnreachable(f"cannot list the channel's reports at {listing_url} ({exc})",
                                hint="the server must list status/ (nginx: autoindex on)") \
            from None
    names = sorted(set(re.findall(r'([A-Za-z0-9][A-Za-z0-9._-]{0,63}\.json)', listing)))
    names = names[:REPORTS_MAX]

    def one(name: str) -> DeviceReport:
        try:
            return parse_report(name, _get(f"{listing_url}{urllib.parse.quote(name)}",
                                           REPORT_MAX))
        except (urllib.error.URLError, OSError) as exc:
            return DeviceReport(
                device=name.removesuffix(".json"), channel="", app="", release="", current="",
                state="unreadable", detail="", serial=0, bytes=0, ts=0,
                problem=f"not fetched ({exc})")
    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, names))
