"""The rollout journal: typed events that round-trip, journals written before the events were
typed still replay, a torn last line is ignored and any other bad line is named."""

import pytest

from edgekit.errors import ConfigError
from edgekit.fleet.journal import JOURNAL, Journal, read_events, replay
from edgekit.models import events as ev

pytestmark = pytest.mark.local

# What edgekit wrote before the events were typed (json.dumps(..., sort_keys=True) of dicts).
OLD_JOURNAL = """\
{"event": "start", "rollout": "r1", "ts": 100.0, "waves": [["d1"], ["d2", "d3"]]}
{"devices": ["d1"], "event": "wave-start", "ts": 100.5, "wave": 1}
{"device": "d1", "event": "device-start", "previous": "a", "ts": 100.6, "wave": 1}
{"device": "d1", "event": "device-step", "step": "preflight", "ts": 100.7}
{"device": "d1", "event": "device-done", "failure": "", "p90_after_ms": null, \
"p90_before_ms": null, "previous": "a", "reason": "", "seconds": 1.2, "status": "updated", \
"ts": 101.8, "wave": 1}
{"event": "wave-done", "failed": 0, "halted": false, "ts": 101.9, "wave": 1}
{"devices": ["d2", "d3"], "event": "wave-start", "ts": 102.0, "wave": 2}
{"device": "d2", "event": "device-start", "previous": null, "ts": 102.1, "wave": 2}
{"device": "d2", "event": "device-done", "failure": "DeviceUnreachable", \
"p90_after_ms": null, "p90_before_ms": null, "previous": null, "reason": "gone", \
"seconds": 0.5, "status": "failed", "ts": 102.6, "wave": 2}
{"event": "wave-done", "failed": 1, "halted": true, "ts": 102.7, "wave": 2}
{"event": "halt", "reason": "wave 2: 1 of 2 device(s) failed", "rollback": "all", \
"ts": 102.8, "wave": 2}
{"device": "d1", "event": "device-rollback", "reason": "rolled back to a after the halt", \
"status": "rolled-back", "to": "a", "ts": 103.0}
{"event": "finished", "status": "halted", "ts": 103.5}
{"event": "device-do
"""


def test_a_journal_written_before_events_were_typed_replays(tmp_path):
    (tmp_path / JOURNAL).write_text(OLD_JOURNAL)
    events = read_events(tmp_path)
    assert len(events) == 13  # the torn last line is ignored
    state = replay(events)
    assert state.done["d1"].status == "updated" and state.done["d2"].failure == \
        "DeviceUnreachable"
    assert state.previous_of("d1") == (True, "a") and state.previous_of("d3") == (False, None)
    assert state.halt.rollback == "all" and state.rollbacks["d1"].to == "a"
    assert state.finished.status == "halted" and state.waves_done[2].halted
    assert state.seconds == pytest.approx(3.5)


def test_events_written_now_read_back_equal(tmp_path):
    seen = []
    journal = Journal(tmp_path, on_event=seen.append)
    written = [journal.write(ev.RolloutStarted(rollout="r", waves=(("d1",),))),
               journal.write(ev.DeviceDone(device="d1", wave=1, status="failed",
                                           reason="x", p90_before_ms=1.5)),
               journal.write(ev.Interrupted())]
    assert read_events(tmp_path) == written == seen
    assert replay(written).interrupted


def test_a_damaged_line_that_is_not_the_last_is_an_error_naming_it(tmp_path):
    (tmp_path / JOURNAL).write_text(OLD_JOURNAL.replace('"event": "halt"', '"event": "?"'))
    with pytest.raises(ConfigError) as err:
        read_events(tmp_path)
    assert err.value.where == f"{tmp_path / JOURNAL}:11"


def test_a_line_that_is_not_utf8_is_an_error_naming_it_and_a_torn_last_one_is_ignored(
        tmp_path):
    lines = OLD_JOURNAL.encode().splitlines(keepends=True)
    (tmp_path / JOURNAL).write_bytes(b"".join(lines[:3]) + b"\xff\xfe garbage\n"
                                     + b"".join(lines[3:]))
    with pytest.raises(ConfigError, match="not UTF-8") as err:
        read_events(tmp_path)
    assert err.value.where == f"{tmp_path / JOURNAL}:4"
    whole = lines[:-1]             # OLD_JOURNAL ends with a torn line of its own
    (tmp_path / JOURNAL).write_bytes(b"".join(whole) + b'{"event": "\xe2\x82')
    assert len(read_events(tmp_path)) == len(whole)
