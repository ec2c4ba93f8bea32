"""A device that does not answer: one line with a hint that leads to the fix, exit 10. Real
sockets on this machine (a port nothing listens on), no device needed."""

import socket
import subprocess
import time

import pytest

from edgekit.config.address import parse_address
from edgekit.errors import DeviceUnreachable
from edgekit.transport.ssh import connect


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("key") / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]        # free again once closed: nothing listens there


def test_a_refused_connection_is_retried_with_backoff_then_answered_with_what_to_check(key):
    address = parse_address(f"pi@127.0.0.1:{closed_port()}")
    began = time.monotonic()
    with pytest.raises(DeviceUnreachable) as err:
        connect(address, key, attempts=3)
    waited = time.monotonic() - began
    assert 0.5 <= waited < 8, waited                    # two jittered waits of 0.25-1, 0.25-2 s
    assert err.value.exit_code == 10
    assert "connect: " in str(err.value) and "(after 3 attempts)" in str(err.value)
    assert f"check the address and port (127.0.0.1:{address.port})" in err.value.hint
    assert f"`edgekit probe {address}`" in err.value.hint


def test_a_host_name_that_does_not_resolve_is_answered_at_once(key):
    began = time.monotonic()
    with pytest.raises(DeviceUnreachable, match="cannot resolve no-such-device.invalid") as err:
        connect(parse_address("pi@no-such-device.invalid"), key)
    assert time.monotonic() - began < 3                 # not retried five times
    assert "check the address and port (no-such-device.invalid:22)" in err.value.hint
