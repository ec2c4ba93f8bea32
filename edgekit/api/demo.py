"""`edgekit demo`: the main job end to end on an embedded default — start a lab device (a real
sshd on 127.0.0.x), deploy an example recipe to it (build, preflight, provision, upload, verify,
validate on the device, activate), report, and stop the device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from edgekit.config.resources import recipes_dir
from edgekit.api.deploy import DeployOptions, DeployResult, deploy
from edgekit.lab import devices as lab

EXAMPLE_RECIPES = recipes_dir()
DEFAULT_RECIPE = EXAMPLE_RECIPES / "mobilenet_v2.yaml"
DEFAULT_TARGET = {"x86_64": "host", "aarch64": "rpi4"}


@dataclass(frozen=True)
class DemoResult:
    device: str
    deploy: DeployResult


def run_demo(recipe: Path = DEFAULT_RECIPE, arch: str = "x86_64", target: str | None = None,
             on_stage: Callable[[str], None] | None = None) -> DemoResult:
    if on_stage:
        on_stage(f"starting an {arch} lab device")
    device = lab.up(arch, 1, on_progress=on_stage)[0]
    try:
        result = deploy(DeployOptions(recipe=recipe, target=target or DEFAULT_TARGET[arch],
                                      host=device.name), on_stage=on_stage)
    finally:
        if on_stage:
            on_stage(f"stopping {device.name}")
        lab.down([device.name])
    # the device is unregistered now: the report names it as it was named while it ran
    result = replace(result, device=device.name,
                     report=result.report.model_copy(update={"where": device.name}))
    return DemoResult(device=device.name, deploy=result)
