"""`edgekit targets derive HOST -o FILE`: a target profile written from the device's probe."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli.main import HOST_HELP, IDENTITY, handle_errors, targets


@targets.command("derive")
@click.argument("host", shell_complete=complete.devices)
@click.option("-o", "--out", required=True, type=click.Path(path_type=Path),
              help="profile to write, e.g. targets/my-board.yaml (a Vulkan device adds "
                   "<name>-gpu.yaml beside it)")
@IDENTITY
@handle_errors
def targets_derive(host: str, out: Path, identity: Path | None) -> None:
    """Probe HOST (""" + HOST_HELP + """) and write a profile for it: the CPU and its
    features, cores, the Vulkan device's IREE target; each value commented with its source."""
    from edgekit.device.derive import BOARD_FACTS, BoardFacts, derive
    from edgekit.device.probe import probe
    from edgekit.transport import open_device
    with open_device(host, identity) as conn:
        address = conn.where
        info = probe(conn)
        facts = BoardFacts.parse(conn.run(["sh", "-c", BOARD_FACTS], check=False).text)
    derived = derive(info, out.stem, address, facts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(derived.cpu_profile)
    render.out.print(f"wrote {escape(str(out))}", highlight=False)
    if derived.gpu_profile:
        gpu = out.with_name(f"{out.stem}-gpu{out.suffix or '.yaml'}")
        gpu.write_text(derived.gpu_profile)
        render.out.print(f"wrote {escape(str(gpu))}", highlight=False)
