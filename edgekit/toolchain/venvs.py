"""Toolchains whose pins conflict with edgekit's own (NPU compilers) live in their own venvs.

`edgekit toolchains install npu|rknn` creates them for the user who runs it, under
`<cache>/toolchains/<name>` (or $EDGEKIT_TOOLCHAINS_DIR/<name>). edgekit looks for them there
first, then in the shared folder /opt/edgekit/toolchains (or $EDGEKIT_SHARED_TOOLCHAINS_DIR),
which an administrator fills once for every user of the machine (`.ci/setup.sh` does, as
root: root's own cache is no other user's). edgekit runs programs in them by subprocess, with
files (npz/JSON) as the
protocol, never by importing them: tosa-tools pins numpy < 2.2, rknn-toolkit2 torch <= 2.4.
A venv counts as installed once its marker (`edgekit-toolchain.json`, written last, with the
installed versions) is there and records every current pin; the versions go into manifests
and build cache keys.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.errors import ConfigError, ToolchainMissing
from edgekit.toolchain.runner import run_tool

MARKER = "edgekit-toolchain.json"
SHARED = Path("/opt/edgekit/toolchains")


def toolchains_root() -> Path:
    """Where `install` puts venvs: <cache>/toolchains, or $EDGEKIT_TOOLCHAINS_DIR (the venvs
    outlive a build cache that is thrown away; the test suite's own cache finds them)."""
    env = os.environ.get("EDGEKIT_TOOLCHAINS_DIR")
    return Path(env).expanduser() if env else cache_root() / "toolchains"


def shared_root() -> Path:
    """The machine's toolchains, installed once for every user."""
    env = os.environ.get("EDGEKIT_SHARED_TOOLCHAINS_DIR")
    return Path(env).expanduser() if env else SHARED


def search_roots() -> tuple[Path, ...]:
    """Where venvs are looked for, in order: the user's own, then the machine's."""
    return tuple(dict.fromkeys((toolchains_root(), shared_root())))


@dataclass(frozen=True)
class Toolchain:
    name: str
    purpose: str
    packages: tuple[str, ...]                 # pinned requirements, installed with their deps
    no_deps: tuple[str, ...] = ()             # pinned, installed without their (conflicting) deps
    system_site_packages: bool = False        # reuse this Python's torch (a second copy is GBs)
    borrowed: tuple[str, ...] = ()            # packages used from this Python (recorded too)
    licence: str | None = None                # must be accepted before installing

    def directory(self) -> Path:
        """Its installed venv (the user's before the machine's), else where `install` puts
        it."""
        for root in search_roots():
            if self._complete(root / self.name):
                return root / self.name
        return toolchains_root() / self.name

    def main_packages(self) -> tuple[str, ...]:
        """The packages it is for (not the dependencies pinned beside them), by name."""
        return tuple(p.split("==")[0] for p in (self.no_deps or self.packages))

    def python(self) -> Path:
        return self.directory() / "bin" / "python"

    def installed(self) -> bool:
        """One of the search roots has it: its marker is there and records every pinned
        package at its pin (a venv made for older pins counts as not installed: `install`
        makes it again)."""
        return any(self._complete(root / self.name) for root in search_roots())

    def _complete(self, where: Path) -> bool:
        try:
            found = json.loads((where / MARKER).read_text())["versions"]
        except (OSError, ValueError, KeyError):
            return False
        return all(found.get(name) == version for name, version in
                   (p.split("==") for p in self.packages + self.no_deps))


TOOLCHAINS: dict[str, Toolchain] = {t.name: t for t in (
    # ExecuTorch's Arm backend: TOSAQuantizer + TOSAPartitioner give integer-only TOSA 1.0
    # (PRO-INT). It needs no torch of its own: this Python's torch 2.13 through site-packages.
    # Its TOSA backend serializes with tosa-tools' tosa_serializer, at the pin of executorch's
    # own `ethos-u` extra (that extra would also pull Vela 5.1.0; the tosa venv has 5.2.0)
    Toolchain("executorch", "integer TOSA for NPUs (ExecuTorch's Arm backend)",
              packages=("executorch==1.5.1", "tosa-tools==2026.5.0"),
              system_site_packages=True),
    # tosa-opt (strict PRO-INT check, serialization), the TOSA reference model, and Vela
    Toolchain("tosa", "TOSA checks, the TOSA reference model and Vela (Ethos-U)",
              packages=("tosa-tools==2026.8.0", "ethos-u-vela==5.2.0")),
    # proprietary; pins torch <= 2.4 and numpy <= 1.26, so installed without its declared deps.
    # Its rknn.api imports torch even to convert ONNX (measured: ModuleNotFoundError without
    # it); PyPI's torch 2.4 is the CUDA build (GBs), so the venv borrows this Python's torch
    # through site-packages (its own numpy 1.26 and onnx 1.18 come first on sys.path).
    # Measured with torch 2.13: ONNX → rk3588 .rknn, int8 calibration and the simulator work;
    # only its PyTorch frontend (load_pytorch), which edgekit does not use, is untested.
    Toolchain("rknn", "Rockchip NPU compiler and simulator (rknn-toolkit2)",
              packages=("numpy==1.26.4", "onnx==1.18.0", "onnxruntime==1.20.1",
                        "protobuf==4.25.4", "psutil==7.0.0", "ruamel.yaml==0.18.10",
                        "scipy==1.13.1", "tqdm==4.67.1", "opencv-python-headless==4.10.0.84",
                        "fast-histogram==0.14"),
              no_deps=("rknn-toolkit2==2.5.0",), system_site_packages=True, borrowed=("torch",),
              licence="rknn-toolkit2 is distributed under Rockchip's proprietary licence "
                      "(https://github.com/airockchip/rknn-toolkit2/blob/master/LICENSE)"),
)}

# what `edgekit toolchains install NAME` installs
GROUPS: dict[str, tuple[str, ...]] = {"npu": ("executorch", "tosa"), "rknn": ("rknn",)}


def toolchain(name: str) -> Toolchain:
    try:
        return TOOLCHAINS[name]
    except KeyError:
        raise ConfigError(f"unknown toolchain '{name}'",
                          hint=f"expected one of: {', '.join(TOOLCHAINS)}") from None


def install_command(name: str) -> str:
    group = next((g for g, members in GROUPS.items() if name in members), name)
    return f"edgekit toolchains install {group}"


def python_of(name: str) -> Path:
    """The Python of toolchain `name`'s venv; ToolchainMissing (exit 5) naming the install
    command when it is not installed."""
    chain = toolchain(name)
    if not chain.installed():
        looked = " or ".join(str(root) for root in search_roots())
        raise ToolchainMissing(f"the {name} toolchain ({chain.purpose}) is not installed "
                               f"(looked in {looked})",
                               hint=f"run `{install_command(name)}`: it installs it for you, "
                                    f"in its own venv under {toolchains_root()}")
    return chain.python()


def versions(name: str) -> dict[str, str]:
    """Installed versions of the toolchain's pinned packages (from its marker): for manifests
    and build cache keys."""
    python_of(name)
    return json.loads((toolchain(name).directory() / MARKER).read_text())["versions"]


def install(group: str, *, accept_licence: bool = False, progress=print) -> list[Toolchain]:
    """Create the venvs of `group` ("npu", "rknn"); those already installed are kept."""
    if group not in GROUPS:
        raise ConfigError(f"unknown toolchain group '{group}'",
                          hint=f"expected one of: {', '.join(GROUPS)}")
    chains = [TOOLCHAINS[n] for n in GROUPS[group]]
    for chain in chains:
        if chain.licence and not accept_licence and not chain.installed():
            raise ConfigError(f"{chain.licence}; installing it means accepting that licence",
                              hint=f"read it, then run `{install_command(chain.name)} "
                                   "--accept-licence`")
    for chain in chains:
        if chain.installed():
            progress(f"{chain.name}: installed ({chain.directory()})")
            continue
        progress(f"{chain.name}: installing {', '.join(chain.packages + chain.no_deps)} "
                 f"into {chain.directory()} …")
        _create(chain)
    return chains


def _create(chain: Toolchain) -> None:
    where = chain.directory()
    shutil.rmtree(where, ignore_errors=True)      # a half-made venv (no marker) starts over
    where.parent.mkdir(parents=True, exist_ok=True)
    venv = [sys.executable, "-m", "venv", str(where)]
    if chain.system_site_packages:
        venv.insert(3, "--system-site-packages")
    hint = "the package index must be reachable (pip's own settings apply)"
    run_tool(venv, what=f"creating the {chain.name} venv", timeout=600)
    pip = [str(chain.python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if chain.packages:
        run_tool(pip + list(chain.packages), what=f"installing the {chain.name} toolchain",
                 hint=hint, timeout=3600)
    if chain.no_deps:
        run_tool(pip + ["--no-deps"] + list(chain.no_deps),
                 what=f"installing the {chain.name} toolchain", hint=hint, timeout=3600)
    names = [p.split("==")[0] for p in chain.packages + chain.no_deps] + list(chain.borrowed)
    found = subprocess.run(
        [str(chain.python()), "-c",
         "import importlib.metadata as m, json, sys; "
         "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))", *names],
        capture_output=True, text=True, check=True).stdout
    (where / MARKER).write_text(json.dumps({"name": chain.name, "versions": json.loads(found)},
                                           indent=1) + "\n")
