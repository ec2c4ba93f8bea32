"""Reaching devices: the `Transport` protocol (base.py), SSH (ssh.py, the only module that
imports paramiko) and a directory on this machine as a device (local.py)."""

from __future__ import annotations

from pathlib import Path

from edgekit.config.address import local_root
from edgekit.config.devices import resolve_device
from edgekit.config.timeouts import Timeouts
from edgekit.transport.base import RemoteEntry, RemoteResult, Transport
from edgekit.transport.local import LocalTransport
from edgekit.transport.ssh import Connection, connect


def open_device(host: str, identity: Path | None = None,
                timeouts: Timeouts | None = None) -> Transport:
    """An open transport to `host`: `local:DIR` (that directory as the device's home), or a
    registered device name or user@host[:port] over SSH (with `identity`, or the registered or
    default key). `timeouts`: the deadlines of every step (default: the built-in ones under
    the EDGEKIT_TIMEOUT_* environment variables)."""
    timeouts = timeouts or Timeouts().with_env()
    root = local_root(host)
    if root is not None:
        return LocalTransport(root.absolute(), timeouts=timeouts)
    address, key = resolve_device(host, identity)
    return connect(address, key, timeouts=timeouts)


__all__ = ["Connection", "LocalTransport", "RemoteEntry", "RemoteResult", "Transport",
           "connect", "open_device"]
