"""The channel's index and the devices' status reports: pure parsing. Reports come from
devices (and anyone who can PUT): bounded, strictly typed, sanitised, never raised from."""

import json

import pytest

from edgekit.channel.index import (BUCKETS, ChannelFile, Index, Release, bucket, over_limit,
                                   parse_index, parse_max_fail, parse_percents)
from edgekit.channel.reports import REPORT_MAX, parse_report
from edgekit.errors import ConfigError

pytestmark = pytest.mark.unit

INDEX = Index(channel="stable", serial=3, app="kws", percent=10, seed="00ff", steps=(10, 100),
              max_fail="5%", paused=False,
              releases=(Release("x86_64", "0123456789abcdef", "2026-12-02T09:00:00+00:00",
                                (ChannelFile("a" * 64, 12, "module.vmfb"),
                                 ChannelFile("b" * 64, 3, "golden/input_0.npy"))),
                        Release("aarch64", "fedcba9876543210", "2026-12-02T09:00:00+00:00",
                                (ChannelFile("c" * 64, 5, "module.vmfb"),))))


def test_an_index_round_trips_and_a_malformed_one_names_its_line():
    assert parse_index(INDEX.render(), "i") == INDEX
    assert INDEX.for_arch("aarch64").files[0].size == 5 and INDEX.total_bytes == 20
    text = INDEX.render().replace("golden/input_0.npy", "../../.profile")
    with pytest.raises(ConfigError, match="line 12: a malformed file entry"):
        parse_index(text, "i")
    with pytest.raises(ConfigError, match="not an edgekit channel index"):
        parse_index("{}", "i")


def test_the_bucket_is_stable_and_spread():
    assert bucket("s", "d1", "r") == bucket("s", "d1", "r")
    buckets = [bucket("seed", f"dev-{i}", "rel") for i in range(2000)]
    assert all(0 <= b < BUCKETS for b in buckets)
    under_10 = sum(b < 1000 for b in buckets) / len(buckets)
    assert 0.07 < under_10 < 0.13


def test_percent_steps_and_max_fail():
    assert parse_percents("10,50,100") == (10, 50, 100)
    for bad in ("50,10", "0", "101", "x"):
        with pytest.raises(ConfigError):
            parse_percents(bad)
    assert parse_max_fail("5%") == "5%" and parse_max_fail("2") == "2"
    with pytest.raises(ConfigError):
        parse_max_fail("-1")
    assert over_limit("5%", 1, 10) and not over_limit("5%", 1, 20)
    assert over_limit("0", 1, 100) and not over_limit("2", 2, 3)


def report(**changes) -> bytes:
    fields = {"device": "d1", "channel": "stable", "app": "kws", "release": "0123456789abcdef",
              "current": "0123456789abcdef", "state": "updated", "detail": "ok", "serial": 3,
              "bytes": 1000, "ts": 1764666000}
    return json.dumps({**fields, **changes}).encode()


def test_a_well_formed_report_is_read():
    r = parse_report("d1.json", report(detail="bad\x1b[31m\nline"))
    assert r.state == "updated" and r.bytes == 1000 and not r.problem
    assert "\x1b" not in r.detail and "\n" not in r.detail


@pytest.mark.parametrize("data, why", [
    (b"x" * (REPORT_MAX + 1), "larger than"),
    (b"\xff\xfe", "not ASCII JSON"),
    (b"[1]", "not a JSON object"),
    (report(device="d2"), "not its file's name"),
    (report(state="owned"), "unknown state"),
    (report(release="../../x"), "not a release id"),
    (report(bytes=-5), "not a whole number"),
    (report(serial=True), "not a whole number"),
    (report(ts=1e300), "not a whole number"),
    (report(channel=5), "not text"),
])
def test_a_report_that_is_not_one_is_listed_as_unreadable(data, why):
    r = parse_report("d1.json", data)
    assert r.state == "unreadable" and why in r.problem
