"""`edgekit probe`, `provision` and `devices …`: what a device is, what it needs installed,
and which host key and signers it is trusted with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.address import DeviceAddress
from edgekit.config.devices import DeviceEntry, load_registry, lookup_device
# hwcap_features: what an emulated aarch64 device's kernel says its CPU has (probe's table)
from edgekit.device.probe import DeviceInfo, hwcap_features, probe as run_probe
from edgekit.device.provision import provision as run_provision
from edgekit.device.trust import untrust_signer as remove
from edgekit.errors import ConfigError, HostKeyChanged
from edgekit.transport import open_device
from edgekit.transport.ssh import fetch_host_key, pin_host_key, pinned_fingerprint

# (step, hint: how to see what it left) of a step that changes the device; the CLI says it
# when Ctrl-C stops one
OnChange = Callable[[str, str], None]


@dataclass(frozen=True)
class Probed:
    device: str                     # the address the device was reached at
    info: DeviceInfo


@dataclass(frozen=True)
class Provisioned:
    device: str
    runtime_dir: str
    shims_dir: str
    uploaded: tuple[str, ...]
    uploaded_bytes: int


@dataclass(frozen=True)
class HostKey:
    address: DeviceAddress
    key_type: str
    key_b64: str
    fingerprint: str                # what the device presents, SHA256:…
    pinned: str | None              # what is pinned for it now


@dataclass(frozen=True)
class Trusted:
    key: HostKey
    status: str                     # "pinned" | "already pinned"


@dataclass(frozen=True)
class Untrusted:
    device: str
    removed: tuple[str, ...]        # the allowed_signers lines taken out


def probe(host: str, identity: Path | None = None) -> Probed:
    """Connect and probe: arch, CPU, memory, disk, OS, Vulkan, NPUs, runtimes."""
    with open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
    return Probed(device=str(address), info=info)


def provision(host: str, target: str | None = None, identity: Path | None = None,
              on_change: OnChange | None = None) -> Provisioned:
    """Install the IREE runtime tools (the compiler's version) and the shims on a device;
    each is checked by running it."""
    if target:
        from edgekit.config.profiles import load_target
        load_target(target)           # a wrong name fails before the device is reached
    with open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
        if on_change:
            on_change(f"provisioning {host}", f"`edgekit provision {host}` again installs "
                      "what is missing and checks it by running it")
        result = run_provision(conn, info)
    return Provisioned(device=str(address), runtime_dir=str(result.runtime_dir),
                       shims_dir=str(result.shims_dir), uploaded=tuple(map(str, result.uploaded)),
                       uploaded_bytes=result.uploaded_bytes)


def host_key(host: str) -> HostKey:
    """The host key a device presents now, and the one pinned for it (if any)."""
    address, _ = lookup_device(host)
    key_type, key_b64, seen = fetch_host_key(address)
    return HostKey(address=address, key_type=key_type, key_b64=key_b64, fingerprint=seen,
                   pinned=pinned_fingerprint(address))


def trust(host: str, fingerprint: str | None = None, replace: bool = False,
          confirm: Callable[[HostKey], bool] | None = None,
          on_key: Callable[[HostKey], None] | None = None) -> Trusted:
    """Pin the device's host key: when it has `fingerprint`, or `confirm(key)` says yes
    (None: yes). A different pinned key is replaced only with `replace`."""
    key = host_key(host)
    if on_key:
        on_key(key)
    if key.pinned == key.fingerprint:
        return Trusted(key, "already pinned")
    if key.pinned and not replace:
        raise HostKeyChanged("a different key is pinned for this device", where=str(key.address),
                             got=key.fingerprint, expected=key.pinned,
                             hint="pass --replace if the device was re-imaged on purpose")
    if fingerprint and fingerprint != key.fingerprint:
        raise ConfigError(f"the device's key is {key.fingerprint}, not {fingerprint}",
                          key="fingerprint")
    if not (fingerprint or confirm is None or confirm(key)):
        raise ConfigError("not pinned", hint="compare the fingerprint with the device's "
                          "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`")
    pin_host_key(key.address, key.key_type, key.key_b64, replace=replace)
    return Trusted(key, "pinned")


def untrust_signer(host: str, signer: str, identity: Path | None = None) -> Untrusted:
    """Remove `signer` (a principal or a key's SHA256:… fingerprint) from the device's
    allowed signers; no such signer is a ConfigError."""
    with open_device(host, identity) as conn:
        address = conn.where
        removed = remove(conn, signer)
    if not removed:
        raise ConfigError(f"no signer {signer!r} on {address}", key="signer",
                          hint="name a principal (the first word of an allowed_signers line) "
                               "or a key fingerprint SHA256:…")
    return Untrusted(device=str(address), removed=tuple(removed))


def registered() -> list[DeviceEntry]:
    """Registered devices (lab devices register themselves)."""
    return list(load_registry().values())


__all__ = ["HostKey", "Probed", "Provisioned", "Trusted", "Untrusted", "host_key",
           "hwcap_features", "probe", "provision", "registered", "trust", "untrust_signer"]
