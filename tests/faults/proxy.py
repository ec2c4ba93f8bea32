"""A userspace TCP proxy between edgekit and a real sshd, that injects network faults for real.

    with FaultProxy(("127.0.0.11", 2222)) as proxy:      # listens on 127.0.0.1:<free port>
        proxy.cut_after(300_000)        # close both sides once 300 kB went client → device
        proxy.stall_after(300_000)      # forward nothing more, either way; keep sockets open
        proxy.slow(200_000)             # forward at most 200 kB/s each way
        proxy.mute()                    # accept, never connect on: a port that speaks no SSH

Faults apply per connection: byte counts are the bytes a connection carried from the client
towards the device (upstream), counted from the start of that connection. `triggered` is set
when a cut or stall happened. `blackhole()` is a port whose SYNs go unanswered (its listen
queue is full): a connect that hangs until the client's own deadline.

Threads, not asyncio: tests drive it from synchronous code while edgekit runs in a subprocess.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

CHUNK = 16384


class FaultProxy:
    def __init__(self, target: tuple[str, int], listen_host: str = "127.0.0.1",
                 listen_port: int = 0):
        self.target = target
        self._listener = socket.create_server((listen_host, listen_port), backlog=64)
        self.host, self.port = self._listener.getsockname()[:2]
        self._lock = threading.Lock()
        self._cut_at: int | None = None
        self._stall_at: int | None = None
        self._rate: float | None = None
        self._mute = False
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self.triggered = threading.Event()
        self.connections = 0
        self.upstream_bytes = 0       # over all connections
        self._thread = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")

    # --- faults --------------------------------------------------------------------------

    def cut_after(self, nbytes: int) -> None:
        """Close both sides of a connection once it carried `nbytes` upstream."""
        self._cut_at = nbytes

    def stall_after(self, nbytes: int) -> None:
        """Forward nothing more, either way, once a connection carried `nbytes` upstream; the
        sockets stay open (a device that stopped answering, e.g. its sshd SIGSTOPped)."""
        self._stall_at = nbytes

    def slow(self, bytes_per_s: float) -> None:
        """Forward at most `bytes_per_s` each way, per connection."""
        self._rate = bytes_per_s

    def mute(self) -> None:
        """Accept connections and never answer: a TCP port that does not speak SSH."""
        self._mute = True

    def clear(self) -> None:
        self._cut_at = self._stall_at = self._rate = None
        self._mute = False

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self._track(client)
            if self._mute:
                continue  # held open, never read, never answered
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _serve(self, client: socket.socket) -> None:
        try:
            device = socket.create_connection(self.target, timeout=10)
        except OSError:
            _close(client)
            return
        device.settimeout(None)
        self._track(device)
        state = _Link()
        threading.Thread(target=self._pump, args=(client, device, state, True),
                         daemon=True).start()
        threading.Thread(target=self._pump, args=(device, client, state, False),
                         daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, link: "_Link",
              upstream: bool) -> None:
        while not self._closed.is_set():
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            if not data or link.cut:
                break
            if upstream:
                data = self._upstream_fault(data, link, dst)
                if data is None:
                    return
            if link.stalled:
                self._closed.wait()  # hold everything: nothing is forwarded any more
                return
            if self._rate:
                time.sleep(len(data) / self._rate)
            try:
                dst.sendall(data)
            except OSError:
                break
        _close(src)
        _close(dst)

    def _upstream_fault(self, data: bytes, link: "_Link", dst: socket.socket) -> bytes | None:
        """Count upstream bytes; cut or stall at the chosen count (forwarding the bytes before
        it). None: the connection is over for this pump."""
        before = link.upstream
        link.upstream += len(data)
        self.upstream_bytes += len(data)
        for at, kind in ((self._cut_at, "cut"), (self._stall_at, "stall")):
            if at is None or link.upstream < at:
                continue
            with contextlib.suppress(OSError):
                dst.sendall(data[:max(0, at - before)])
            self.triggered.set()
            if kind == "cut":
                link.cut = True
                _close(dst)
                return None
            link.stalled = True
            self._closed.wait()
            return None
        return data


class _Link:
    """One proxied connection's state, shared by its two pumps."""

    def __init__(self) -> None:
        self.upstream = 0
        self.cut = False
        self.stalled = False


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def blackhole(host: str = "127.0.0.1") -> Iterator[tuple[str, int]]:
    """A port that never answers a SYN: it listens with a full accept queue (Linux then drops
    new SYNs), so a TCP connect hangs until the client's own deadline."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(0)
    address = listener.getsockname()[:2]
    fillers = []
    try:
        for _ in range(8):  # fill the accept queue (backlog 0 holds one or two)
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(address)
            fillers.append(filler)
        time.sleep(0.2)
        yield address
    finally:
        for sock in [*fillers, listener]:
            sock.close()
