"""`edgekit lab …`: emulated devices (a real sshd on 127.0.0.x) started, listed and stopped."""

from __future__ import annotations

from collections.abc import Callable

from edgekit.errors import ConfigError

Say = Callable[[str], None]


def up(arch: str = "x86_64", count: int | None = None, names: tuple[str, ...] = (),
       on_progress: Say | None = None) -> list:
    """Start lab devices as this user, pin their host keys and register them by name.
    Returns edgekit.lab.devices.LabDevice each."""
    from edgekit.lab import devices
    if names and count is not None and count != len(names):
        raise ConfigError(f"--count {count} but {len(names)} --name given", key="--count",
                          hint="give one --name per device, or --count alone")
    return devices.up(arch, count or len(names) or 1, on_progress=on_progress,
                      names=list(names) or None)


def status() -> list[dict]:
    """Every lab device: name, address, arch, identity and whether it runs."""
    from edgekit.lab import devices
    return devices.status()


def running() -> list[str]:
    """The names of the lab devices that run now."""
    return [d["name"] for d in status() if d["running"]]


def down(names: list[str] | None = None, on_progress: Say | None = None) -> list[str]:
    """Stop lab devices (all, or those named), remove their files and registrations."""
    from edgekit.lab import devices
    return devices.down(names, on_progress=on_progress)


__all__ = ["down", "running", "status", "up"]
