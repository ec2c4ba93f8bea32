"""IREE: pure builders of iree-compile / iree-run-module command lines, and running them.

This and torch_mlir.py are the only modules that know about the toolchain's packages.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.errors import ToolError
from edgekit.toolchain.runner import run_tool

# What each lowering hands IREE as its input dialect.
INPUT_TYPE = {"tosa": "tosa", "linalg": "auto", "torch": "torch"}


def target_flags(target: Target) -> tuple[str, ...]:
    """The backend and codegen flags a target profile implies (without input type)."""
    flags = [f"--iree-hal-target-backends={target.backend}"]
    if target.cpu is not None:
        if target.cpu.triple:
            flags.append(f"--iree-llvmcpu-target-triple={target.cpu.triple}")
        flags.append(f"--iree-llvmcpu-target-cpu={target.cpu.cpu}")
        if target.cpu.features:
            flags.append(f"--iree-llvmcpu-target-cpu-features={target.cpu.features}")
    if target.vulkan is not None:
        flags.append(f"--iree-vulkan-target={target.vulkan.target}")
    return (*flags, *target.flags)


def compile_flags(target: Target, lowering: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every iree-compile flag for this target and lowering, recipe flags last (they win)."""
    return (f"--iree-input-type={INPUT_TYPE[lowering]}", *target_flags(target), *extra)


def tool_path(name: str) -> str:
    """Path of an IREE command-line tool shipped in the compiler or runtime wheel."""
    if name == "iree-compile":
        from iree.compiler.tools.binaries import find_tool
        return find_tool("iree-compile")
    import iree._runtime_libs as runtime_libs
    path = Path(runtime_libs.__file__).parent / name
    if not path.exists():
        raise ToolError(f"{name} not found in the iree-base-runtime wheel", argv=[name],
                        returncode=127, stderr_tail="",
                        hint="pip install iree-base-runtime (same version as the compiler)")
    return str(path)


class CompileFailure(Exception):
    """iree-compile rejected the input: the ops it named and its diagnostics."""

    def __init__(self, ops: tuple[str, ...], diagnostics: str):
        super().__init__(diagnostics)
        self.ops = ops
        self.diagnostics = diagnostics


def compile_module(source: Path, output: Path, flags: tuple[str, ...]) -> None:
    """Run iree-compile on an MLIR file (text or bytecode) to a .vmfb."""
    argv = [tool_path("iree-compile"), str(source), *flags, "-o", str(output)]
    try:
        run_tool(argv, what="iree-compile failed")
    except ToolError as exc:
        raise CompileFailure(ops=failing_ops(exc.stderr_tail),
                             diagnostics=exc.stderr_tail) from None


def compile_bytes(module: bytes, flags: tuple[str, ...], output: Path | None = None) -> None:
    """iree-compile MLIR bytecode held in memory (scratch files), to `output` if given."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="edgekit-compile-") as tmp:
        source = Path(tmp) / "input.mlirbc"
        source.write_bytes(module)
        compile_module(source, output or Path(tmp) / "module.vmfb", flags)


_OP_PATTERNS = (
    re.compile(r"failed to legalize operation '([\w.]+)'"),
    re.compile(r"'([\w.]+)' op (?:is not|failed|not supported|unsupported)"),
    re.compile(r"unsupported op(?:eration)? '?([\w.]+)'?"),
)


def failing_ops(diagnostics: str) -> tuple[str, ...]:
    """Op names that compiler diagnostics blame, in order of first mention."""
    ops: list[str] = []
    for pattern in _OP_PATTERNS:
        for name in pattern.findall(diagnostics):
            if name not in ops:
                ops.append(name)
    return tuple(ops)


def run_module_argv(module: Path | str, driver: str, function: str, inputs: list,
                    outputs: list, tool: str | None = None) -> list[str]:
    """iree-run-module command line that reads .npy inputs and writes .npy outputs (`tool`:
    the binary to use, e.g. a device's; default: this machine's)."""
    argv = [tool or tool_path("iree-run-module"), f"--module={module}", f"--device={driver}",
            f"--function={function}"]
    argv += [f"--input=@{p}" for p in inputs]
    argv += [f"--output=@{p}" for p in outputs]
    return argv


def run_module(module: Path, driver: str, function: str, inputs: list[Path],
               outputs: list[Path]) -> None:
    run_tool(run_module_argv(module, driver, function, inputs, outputs),
             what="iree-run-module failed",
             hint="the module may not fit this machine's CPU or Vulkan device")
