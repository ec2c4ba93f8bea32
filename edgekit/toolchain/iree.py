"""IREE: pure builders of iree-compile / iree-run-module command lines, and running them.

This and torch_mlir.py are the only modules that know about the toolchain's packages.
"""

from __future__ import annotations

import re
from pathlib import Path

from edgekit.config.edgekit_flags import parse_edgekit_flags, without_edgekit_flags
from edgekit.config.profiles import Target
from edgekit.errors import ConfigError, ToolError
from edgekit.toolchain import dispatch_sets
from edgekit.toolchain.runner import run_tool

# What each lowering hands IREE as its input dialect (unless the import provides the lowering's
# module in another one: pipeline/lower.py's ImportedGraph).
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


# What makes a quantization mode what it is (speed flags per mode are data in the profiles).
# fp16: the demotion's default operation set is empty, and on CPU convolutions are only demoted
# once im2col has turned them into matmuls (measured; the contraction census checks it).
# int8-weights: without const-eval the int8 weights stay int8 in the module (dequantized when
# the module runs) instead of being folded back to f32 constants at compile time.
MODE_FLAGS = {"int8-weights": ("--iree-opt-const-eval=false",),
              "fp16": ("--iree-global-opt-demote-contraction-inputs-type=f16",
                       "--iree-global-opt-demote-contraction-inputs-operations=all",
                       "--iree-global-opt-use-im2col-for-convs")}


def compile_flags(target: Target, lowering: str, extra: tuple[str, ...] = (),
                  quantize_mode: str | None = None, input_type: str | None = None
                  ) -> tuple[str, ...]:
    """Every iree-compile flag for this target and lowering, recipe flags last (they win);
    `input_type`: the module's IREE input type when it is not the lowering's own."""
    input_type = input_type or INPUT_TYPE[lowering]
    mode_flags: tuple[str, ...] = ()
    if quantize_mode:
        mode_flags = (*MODE_FLAGS.get(quantize_mode, ()),
                      *without_edgekit_flags(target.quantize_flags.get(quantize_mode, ())))
    return (f"--iree-input-type={input_type}", *target_flags(target), *mode_flags,
            *without_edgekit_flags(extra), *dispatch_config_flags(extra))


def dispatch_configs_dir(digest: str) -> Path:
    """Where `edgekit tune` keeps a set of per-dispatch configurations, by content digest."""
    return dispatch_configs_root() / digest


def dispatch_configs_root() -> Path:
    return dispatch_sets.root()


def dispatch_config_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """`--edgekit-dispatch-configs=DIGEST` as iree-compile's substitution of configured
    executables (each `<executable>.mlir` in the set replaces that hal.executable after
    strategy selection: tune/dispatch_configs.py)."""
    digest = parse_edgekit_flags(flags).get("dispatch-configs")
    if digest is None:
        return ()
    directory = dispatch_configs_dir(str(digest))
    if not directory.is_dir():
        raise ConfigError(f"tuned dispatch configurations {str(digest)[:12]}… are not in "
                          f"{directory.parent}", key="--edgekit-dispatch-configs",
                          hint="a bundle built with them carries them: put it at the build's "
                               "--out (or `edgekit bisect --bundle` it); else run `edgekit "
                               "tune` again for this model and target, or build --no-tuned")
    return (f"--iree-hal-substitute-executable-configurations-from={directory}",)


def driver_for_threads(driver: str, threads: int) -> str:
    """The runtime driver for a module run with `threads` CPU workers. With one worker,
    local-task only adds a worker thread and task-graph bookkeeping to every call; local-sync
    runs the same executables inline on the caller's thread (KWS MLP on this machine: 0.032
    vs 0.057 ms per call). The module is the same for both drivers."""
    return "local-sync" if driver == "local-task" and threads == 1 else driver


def runtime_config(driver: str, threads: int | None) -> tuple[str, int | None]:
    """(driver, worker count) a module runs with when tuned for `threads` (None: not tuned,
    the driver's default topology). Only local-task has a worker count: local-sync runs on the
    caller's thread, Vulkan on the GPU."""
    if threads is None:
        return driver, None
    driver = driver_for_threads(driver, threads)
    return driver, threads if driver == "local-task" else None


def runtime_flags(driver: str, threads: int | None) -> tuple[str, ...]:
    """The iree-run-module / iree-benchmark-module flags of that configuration."""
    flags = (f"--device={driver}",)
    if driver == "local-task" and threads is not None:
        flags += (f"--task_topology_group_count={threads}",)
    return flags


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
    # IREE's ONNX input: an ONNX op it has no conversion for stays a torch.operator named onnx.X
    re.compile(r"failed to legalize operation 'torch\.operator'[^\n]*?name = \"(onnx\.[\w.]+)\""),
    re.compile(r"failed to legalize operation '((?!torch\.operator')[\w.]+)'"),
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
                    outputs: list, tool: str | None = None,
                    threads: int | None = None) -> list[str]:
    """iree-run-module command line that reads .npy inputs and writes outputs (.npy, or raw
    bytes where the file name ends in .bin: validate/outputs.py) (`tool`: the binary to use,
    e.g. a device's; default: this machine's; `threads`: local-task's worker count, as the
    manifest's runtime_threads)."""
    argv = [tool or tool_path("iree-run-module"), f"--module={module}",
            *runtime_flags(driver, threads), f"--function={function}"]
    argv += [f"--input=@{p}" for p in inputs]
    argv += [f"--output=@{p}" for p in outputs]
    return argv


def run_module(module: Path, driver: str, function: str, inputs: list[Path],
               outputs: list[Path], threads: int | None = None) -> None:
    run_tool(run_module_argv(module, driver, function, inputs, outputs, threads=threads),
             what="iree-run-module failed",
             hint="the module may not fit this machine's CPU or Vulkan device")


# Ops that multiply two tensors and reduce: what "int8 compute" is about. Pooling (input ×
# window shape) and single-input reductions (sums, means) are not contractions.
_NAMED_CONTRACTION = re.compile(
    r"^linalg\.(?:(?:batch_)?(?:reduce_)?matmul\w*|(?:depthwise_)?conv\w*|quantized_\w+|"
    r"(?:batch_)?mmt4d|contract|dot|matvec|vecmat|batch_matvec|batch_vecmat)$")
_LINALG_OP = re.compile(r"(linalg\.\w+)")
_INS = re.compile(r"\bins\(([^)]*)\)")
_INNER_TILED = re.compile(r"\biree_codegen\.inner_tiled ins\(.*\s:\s(tensor<[^>]*>,\s*"
                          r"tensor<[^>]*>) into tensor<")
_TENSOR_ELEMENT = re.compile(r"tensor<([^,>]*)")


def contraction_element_types(mlir_text: str) -> list[tuple[str, tuple[str, ...]]]:
    """(op, element types of its tensor inputs) for every contraction in printed MLIR."""
    found = []
    for line in mlir_text.splitlines():
        tiled = _INNER_TILED.search(line)
        if tiled:       # data tiling on IREE's global-optimization path: operand types last
            found.append(("iree_codegen.inner_tiled",
                          tuple(t.split("x")[-1] for t in
                                _TENSOR_ELEMENT.findall(tiled.group(1))[:2])))
            continue
        op, ins = _LINALG_OP.search(line), _INS.search(line)
        if not (op and ins):
            continue
        types = tuple(t.split("x")[-1] for t in _TENSOR_ELEMENT.findall(ins.group(1)))
        name = op.group(1)
        named = bool(_NAMED_CONTRACTION.match(name))
        generic = name == "linalg.generic" and '"reduction"' in line and len(types) >= 2
        if (named or generic) and types:
            found.append((name, types[:2]))
    return found


def global_optimization_ir(source: Path, flags: tuple[str, ...]) -> str:
    """The module as IREE's global optimization leaves it: where dequantize → contraction has
    become integer arithmetic and contraction inputs have been demoted, before codegen."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="edgekit-census-") as tmp:
        output = Path(tmp) / "global-opt.mlir"
        argv = [tool_path("iree-compile"), str(source), *flags,
                "--compile-to=global-optimization", "--mlir-elide-elementsattrs-if-larger=4",
                "--mlir-elide-resource-strings-if-larger=4", "-o", str(output)]
        run_tool(argv, what="iree-compile (contraction census) failed")
        return output.read_text()
