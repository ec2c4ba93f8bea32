"""Command lines of the TOSA tools and Vela (Arm Ethos-U), all in the `tosa` venv, and of the
programs edgekit runs inside the NPU venvs: pure argv builders (toolchain/runner.py runs them).

Torch-free: the source key of a build (pipeline/source_key.py) reads the versions from here.
"""

from __future__ import annotations

from pathlib import Path

from edgekit.toolchain import venvs

# what an Ethos-U build runs: ExecuTorch's Arm backend (quantize, partition, integer TOSA) and
# tosa-tools + Vela (strict check, reference model, NPU compiler): the family's venvs
ETHOS_TOOLCHAINS = ("executorch", "tosa")
STRICT_PRO_INT = ('--tosa-attach-target=profiles=pro_int specification_version=1.0',
                  '--tosa-validate=strict-op-spec-alignment=true')
VELA_CONFIG = "Arm/vela.ini"      # shipped inside Vela (config_files/)
SCRIPTS = Path(__file__).resolve().parent / "venv_scripts"   # run inside the venvs


def _bin(venv: str, tool: str) -> str:
    return str(venvs.python_of(venv).parent / tool)


def venv_script_argv(venv: str, script: str, *args: str | Path) -> list[str]:
    """A program of venv_scripts/ run by the venv's own Python (`-I`: this process's
    PYTHONPATH and the user's site do not leak in)."""
    return [str(venvs.python_of(venv)), "-I", str(SCRIPTS / script), *map(str, args)]


def deserialize_argv(flatbuffer: Path, mlir: Path, generic: bool = False) -> list[str]:
    """TOSA flatbuffer → TOSA MLIR (generic form: what IREE's TOSA input reads)."""
    argv = [_bin("tosa", "tosa-opt"), "--tosa-deserialize",
            f"--tosa-deserialize-filename={flatbuffer}", "-o", str(mlir), "/dev/null"]
    return argv + (["--mlir-print-op-generic"] if generic else [])


def strict_check_argv(mlir: Path, flatbuffer: Path) -> list[str]:
    """The strict TOSA 1.0 PRO-INT check, and serialization only if it passes."""
    return [_bin("tosa", "tosa-opt"), str(mlir), *STRICT_PRO_INT, "--tosa-serialize",
            f"--tosa-flatbuffer-filename={flatbuffer}", "-o", "/dev/null"]


def vela_argv(tosa: Path, out_dir: Path, accelerator: str, system_config: str | None,
              memory_mode: str | None) -> list[str]:
    argv = [_bin("tosa", "vela"), "--accelerator-config", accelerator,
            "--output-dir", str(out_dir)]
    # named explicitly (Vela otherwise warns that it guessed): its own system configurations
    argv += ["--config", VELA_CONFIG]
    if system_config:
        argv += ["--system-config", system_config]
    if memory_mode:
        argv += ["--memory-mode", memory_mode]
    return argv + [str(tosa)]
