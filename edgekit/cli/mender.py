"""`edgekit export mender BUNDLE`: Mender as the update engine (edgekit/api/mender.py); its
`edgekit agent install --mender HOST` is in cli/agent.py."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import render
from edgekit.cli.common import JSON, examples, handle_errors


@click.group()
def export() -> None:
    """Write a bundle in the format of another update engine."""


@export.command("mender", epilog=examples(
    "edgekit export mender build/kws-rpi4 --device-type raspberrypi4 -k m.pem",
    "edgekit export mender build/kws-rpi4 --device-type pi4 -k m.pem -o k.mender"))
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


# `edgekit agent install --mender HOST` is in cli/agent.py, beside the channel agent's
