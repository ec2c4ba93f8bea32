"""`edgekit probe`, `provision` and `devices …`: what a device is and has, and what it is
trusted with."""

from __future__ import annotations

from pathlib import Path

import click

from edgekit.cli import complete, render
from edgekit.cli.common import IDENTITY, JSON, WIDE, changing, connecting, examples, \
    handle_errors


@click.command(epilog=examples(
    "edgekit probe lab-aarch64-1",
    "edgekit probe pi@192.0.2.10:2222 --identity ~/.ssh/id_ed25519 --json"))
@click.argument("host", shell_complete=complete.devices)
@IDENTITY
@JSON
@WIDE
@handle_errors
def probe(host: str, identity: Path | None, as_json: bool) -> None:
    """What a device is: arch, CPU, memory, disk, OS, Vulkan, NPUs, runtimes."""
    from edgekit.api.devices import probe as run_probe
    with connecting(host):
        probed = run_probe(host, identity)
    if as_json:
        render.emit_json({"device": probed.device, **probed.info.model_dump(mode="json")})
    else:
        render.probe_table(render.named(probed.device), probed.info)


@click.command(epilog=examples(
    "edgekit provision pi@192.0.2.10 --target rpi4"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--target", help="(informational) the profile you will deploy",
              shell_complete=complete.targets)
@IDENTITY
@JSON
@handle_errors
def provision(host: str, target: str | None, identity: Path | None, as_json: bool) -> None:
    """Install the IREE runtime tools (the compiler's version) and the shims on a device."""
    from dataclasses import asdict

    from edgekit.api.devices import provision as run_provision
    if target:
        from edgekit.config.profiles import load_target
        load_target(target)            # a wrong name, before "connecting to …"
    with connecting(host):
        result = run_provision(host, target, identity, on_change=changing)
    if as_json:
        render.emit_json(asdict(result))
        return
    state = (f"installed {len(result.uploaded)} file(s), {result.uploaded_bytes:,} bytes"
             if result.uploaded else "already up to date")
    render.out.print(f"{result.device}: runtime {result.runtime_dir}, shims {result.shims_dir}: "
                     f"{state}; verified by running them")


@click.group()
def devices() -> None:
    """Known devices and their pinned host keys."""


@devices.command("trust", epilog=examples(
    "edgekit devices trust pi@192.0.2.10",
    "edgekit devices trust pi@192.0.2.10 --fingerprint SHA256:… --yes"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--fingerprint", help="pin only if the device's key has this SHA256 fingerprint")
@click.option("--replace", is_flag=True, help="replace a pinned key (device re-imaged)")
@click.option("--yes", is_flag=True, help="do not ask")
@JSON
@handle_errors
def devices_trust(host: str, fingerprint: str | None, replace: bool, yes: bool,
                  as_json: bool) -> None:
    """Show a device's host key fingerprint and pin it."""
    from edgekit.api.devices import trust
    from edgekit.errors import ConfigError
    if as_json and not (fingerprint or yes):
        raise ConfigError("--json asks no question: give --fingerprint SHA256:… or --yes",
                          key="--json")

    def show(key) -> None:
        if not as_json:
            render.out.print(f"{key.address} presents {key.key_type} {key.fingerprint}")
    trusted = trust(host, fingerprint=fingerprint, replace=replace, on_key=show,
                    confirm=None if yes else lambda key: click.confirm("pin this key?",
                                                                       default=False))
    if as_json:
        render.emit_json({"device": str(trusted.key.address), "key_type": trusted.key.key_type,
                          "fingerprint": trusted.key.fingerprint, "status": trusted.status})
    else:
        render.out.print(trusted.status)


@devices.command("untrust-signer", epilog=examples(
    "edgekit devices untrust-signer pi@192.0.2.10 ci@example.com"))
@click.argument("host")
@click.argument("signer")
@click.option("--identity", type=click.Path(path_type=Path), help="private key [default: the "
              "registered device's, else ~/.ssh/id_*]")
@JSON
@handle_errors
def devices_untrust_signer(host: str, signer: str, identity: Path | None,
                           as_json: bool) -> None:
    """Remove SIGNER (a principal, or a key's SHA256:… fingerprint) from HOST's allowed
    signers. Deploys only ever add to that set (a device may have several controllers):
    this is how a key leaves it. Releases it signed no longer verify there."""
    from edgekit.api.devices import untrust_signer
    with connecting(host):
        result = untrust_signer(host, signer, identity)
    if as_json:
        render.emit_json({"device": result.device, "removed": list(result.removed)})
        return
    for line in result.removed:
        render.out.print(f"{render.untrusted(result.device)}: removed {render.untrusted(line)}",
                         highlight=False)


@devices.command("list", epilog=examples(
    "edgekit devices list",
    "edgekit devices list --json"))
@JSON
@handle_errors
def devices_list(as_json: bool) -> None:
    """Registered devices (lab devices register themselves)."""
    from edgekit.api.devices import registered
    entries = [e.model_dump() for e in registered()]
    if as_json:
        render.emit_json(entries)
        return
    for e in entries:
        render.out.print(f"{e['name']:<18} {e['address']:<28} {e['arch']:<8} {e['identity']}")
