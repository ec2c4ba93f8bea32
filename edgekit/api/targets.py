"""`edgekit targets …`: the target profiles, one resolved with its compiler flags, and a
profile derived from a device's probe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgekit.config.profiles import Target, available_targets, load_target


@dataclass(frozen=True)
class Derived:
    device: str                     # the address probed
    written: tuple[Path, ...]       # the CPU profile, then the GPU one if the device has Vulkan


def list_targets() -> list[Target]:
    """Every profile found (EDGEKIT_TARGETS_PATH, ./targets, built-in)."""
    return [load_target(str(path)) for path in available_targets().values()]


def show(name: str) -> dict:
    """A profile after `extends:`, with the iree-compile flags it implies."""
    from edgekit.toolchain.iree import target_flags
    target = load_target(name)
    return {**target.model_dump(mode="json"), "iree_compile_flags": list(target_flags(target))}


def derive(host: str, out: Path, identity: Path | None = None) -> Derived:
    """Probe `host` and write a profile for it at `out` (a Vulkan device adds
    <name>-gpu.yaml beside it), each value commented with its source."""
    from edgekit.device.derive import BOARD_FACTS, BoardFacts, derive as derive_profile
    from edgekit.device.probe import probe
    from edgekit.transport import open_device
    with open_device(host, identity) as conn:
        address = conn.where
        info = probe(conn)
        facts = BoardFacts.parse(conn.run(["sh", "-c", BOARD_FACTS], check=False).text)
    derived = derive_profile(info, out.stem, address, facts)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(derived.cpu_profile)
    written = [out]
    if derived.gpu_profile:
        gpu = out.with_name(f"{out.stem}-gpu{out.suffix or '.yaml'}")
        gpu.write_text(derived.gpu_profile)
        written.append(gpu)
    return Derived(device=str(address), written=tuple(written))


__all__ = ["Derived", "derive", "list_targets", "show"]
