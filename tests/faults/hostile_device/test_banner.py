"""A port that answers with something other than SSH (a web server, a device's console) fails
in one line after its first words, and is not retried (README: "a port that does not speak
SSH … not retried") (issue 36, item 8)."""

import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from edgekit.config.address import parse_address
from edgekit.errors import DeviceUnreachable
from edgekit.transport.ssh import connect


@pytest.fixture
def http_port():
    """A real TCP server on 127.0.0.1 that greets every connection with an HTTP error and
    closes it; yields (port, list of connections accepted)."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[float] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\x1b[2J\r\n")
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def test_a_port_that_answers_http_fails_in_one_line_without_retries(http_port, tmp_path):
    port, accepted = http_port
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    started = time.monotonic()
    with pytest.raises(DeviceUnreachable, match=r"banner: the port does not speak SSH \(it "
                                                r"said 'HTTP/1.1 400 Bad Request'\)") as err:
        connect(parse_address(f"u@127.0.0.1:{port}"), Path(key),
                known_hosts=tmp_path / "known_hosts")
    assert time.monotonic() - started < 3 and len(accepted) == 1
    assert "\n" not in err.value.what and "\x1b" not in str(err.value)
