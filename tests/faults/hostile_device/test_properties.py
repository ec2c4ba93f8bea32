"""A property test (hypothesis) of the device's side of the link lying in every way it can:
any bytes as a validation output, any journal, any probe text. Each ends in a value edgekit
can use or a typed error (DeviceError, or ValueError where the caller turns it into one) —
never another exception, never unbounded memory — and rendering it writes no raw control
character."""

import io
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.cli import render
from edgekit.device.probe import DeviceInfo, parse_probe
from edgekit.device.releases import activation_history
from edgekit.errors import DeviceError
from edgekit.fleet.status import last_validation
from edgekit.transport.local import LocalTransport
from edgekit.validate.outputs import output_byte_cap, read_output

APP = "app"
SETTINGS = settings(max_examples=int(os.environ.get("EDGEKIT_HOSTILE_EXAMPLES", "150")),
                    deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
SHAPE, DTYPE = (1, 12), "float32"
NASTY = ["[/]", "\x1b[2J", "\x1b]0;x\x07", "\r", "\x00", "\u202e", "1e999", "NaN", "-1",
         "²", "0x", "99999999999999999999999999"]


@pytest.fixture(scope="module")
def device(tmp_path_factory) -> LocalTransport:
    root = tmp_path_factory.mktemp("hostile-device")
    (root / ".edgekit" / "apps" / APP).mkdir(parents=True)
    return LocalTransport(root)


def npy_bytes(shape, dtype="<f4", data: bytes = b"") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False,
                                                  "shape": tuple(shape)})
    return buffer.getvalue() + data


outputs = st.one_of(
    st.binary(max_size=600),
    st.builds(npy_bytes, st.lists(st.integers(0, 2 ** 45), max_size=4),
              st.sampled_from(["<f4", "<f8", "|O", "<i8", ">f4"]), st.binary(max_size=200)),
    st.builds(lambda n: npy_bytes(SHAPE, "<f4", b"\0" * n), st.integers(0, 100)))


@SETTINGS
@given(data=outputs)
def test_any_bytes_as_an_output_are_an_array_or_a_typed_refusal(device, tmp_path, data):
    (device.root / "out.npy").write_bytes(data)
    local = tmp_path / "out.npy"
    cap = output_byte_cap(int(np.prod(SHAPE)) * 4)
    try:
        device.get("out.npy", local, max_bytes=cap)
    except DeviceError:
        assert len(data) > cap
        return
    assert local.stat().st_size <= cap
    try:
        array = read_output(local, DTYPE, SHAPE)
    except (ValueError, EOFError):
        return       # deploy turns these into RemoteCommandFailed (_unreadable_output)
    assert array.nbytes <= cap


journal_lines = st.one_of(
    st.text(max_size=80),
    st.builds(lambda ts, ev, rel: json.dumps({"ts": ts, "event": ev, "release": rel}),
              st.one_of(st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True),
                        st.sampled_from(NASTY), st.none()),
              st.sampled_from(["validated", "rejected", "activate", "rollback", 5]),
              st.one_of(st.sampled_from(NASTY), st.text(max_size=70),
                        st.just("0123456789abcdef"))),
    st.builds(json.dumps, st.one_of(st.lists(st.integers()), st.integers(), st.none())))


@SETTINGS
@given(lines=st.lists(journal_lines, max_size=12), raw=st.binary(max_size=64))
def test_any_journal_gives_a_history_a_row_or_a_typed_refusal(device, lines, raw):
    journal = device.root / ".edgekit" / "apps" / APP / "journal.jsonl"
    journal.write_bytes(raw + "\n".join(lines).encode("utf-8", "surrogatepass"))
    history = activation_history(device, APP)
    assert all(isinstance(r, str) for r in history)
    try:
        seen = last_validation(device, APP)
    except DeviceError as exc:
        assert "\n" not in exc.what
        return
    assert seen is None or len(seen.release) <= 64


@SETTINGS
@given(lines=st.lists(st.tuples(st.sampled_from(list(DeviceInfo.model_fields) + ["x"]),
                                st.one_of(st.sampled_from(NASTY), st.text(max_size=40))),
                      max_size=20))
def test_any_probe_text_is_a_device_info_or_a_typed_error_and_renders_escaped(lines):
    text = "\n".join(f"{key}={value}" for key, value in lines)
    try:
        info = parse_probe(text)
    except DeviceError:
        return
    buffer = io.StringIO()
    saved = render.out
    render.out = render.SafeConsole(file=buffer, width=80, color_system=None)
    try:
        render.probe_table("device", info)
    finally:
        render.out = saved
    shown = buffer.getvalue()
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) < 0xa0 for c in shown)
    assert info.cores <= 1 << 20 and info.mem_kb <= 1 << 50 and info.free_kb <= 1 << 50
