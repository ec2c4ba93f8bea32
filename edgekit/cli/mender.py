"""`edgekit export mender BUNDLE` and `edgekit agent install --mender HOST`: Mender as the
update engine (edgekit/api/mender.py)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.common import HOST_HELP, IDENTITY, JSON, examples, handle_errors


@click.group()
def export() -> None:
    """Write a bundle in the format of another update engine."""


@export.command("mender", epilog=examples(
    "edgekit export mender build/kws-rpi4 --device-type raspberrypi4 \\",
    "    --key mender.pem -o kws.mender"))
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--device-type", "device_types", multiple=True, required=True,
              help="a Mender device type the artifact installs on (repeat for several)")
@click.option("-k", "--key", required=True, type=click.Path(path_type=Path),
              help="PEM private key mender-artifact signs with: RSA (openssl genrsa "
                   "-traditional) or ECDSA P-256 (openssl ecparam -name prime256v1)")
@click.option("-o", "--out", required=True, type=click.Path(path_type=Path),
              help="the .mender file to write")
@click.option("--name", default=None, help="artifact name (default: <app>-<release>)")
@JSON
@handle_errors
def export_mender(bundle: Path, device_types: tuple[str, ...], key: Path, out: Path,
                  name: str | None, as_json: bool) -> None:
    """Write BUNDLE as a signed Mender artifact (payload type `edgekit`), installed by the
    edgekit update module (`edgekit agent install --mender HOST`)."""
    from edgekit.api.mender import MenderExportOptions, export_mender as run
    result = run(MenderExportOptions(bundle=bundle, out=out, device_types=device_types,
                                     key=key, name=name))
    if as_json:
        render.emit_json({"artifact": str(result.path), "name": result.name,
                          "app": result.app, "release": result.release,
                          "device_types": list(result.device_types), "bytes": result.size,
                          "payload_bytes": result.payload_size})
        return
    render.out.print(f"wrote {escape(str(result.path))} ({result.size} bytes): artifact "
                     f"{escape(result.name)}, release {result.release} of "
                     f"{escape(result.app)}, for {escape(', '.join(result.device_types))}",
                     highlight=False)


@click.group()
def agent() -> None:
    """Put what pulls and installs releases on a device."""


@agent.command("install", epilog=examples("edgekit agent install --mender pi@10.0.0.7"),
               short_help="Install what a Mender-managed device needs for edgekit artifacts.",
               help=f"Install on HOST ({HOST_HELP}) what a Mender-managed device needs to "
                    "install `edgekit export mender` artifacts: the update module, the shims, "
                    "the IREE runtime and this machine's trusted signers.")
@click.argument("host", shell_complete=complete.devices)
@click.option("--mender", is_flag=True, required=True,
              help="install edgekit's Mender update module (mender-client 3.x)")
@click.option("--modules-dir", default=None,
              help="where the client reads update modules (default "
                   "/usr/share/mender/modules/v3)")
@IDENTITY
@JSON
@handle_errors
def agent_install(host: str, mender: bool, modules_dir: str | None,
                  identity: Path | None, as_json: bool) -> None:
    # (its help is the decorator's: a docstring cannot hold HOST_HELP)
    from edgekit.api.mender import MODULES_DIR, install_mender_module
    result = install_mender_module(host, modules_dir or MODULES_DIR, identity)
    if as_json:
        render.emit_json({"host": host, "module": result.module, "shims": result.shims,
                          "runtime": result.runtime, "uploaded": list(result.uploaded)})
        return
    render.out.print(f"installed the edgekit update module at {escape(result.module)} on "
                     f"{escape(host)} ({len(result.uploaded)} file(s) sent)", highlight=False)
