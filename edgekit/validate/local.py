"""`edgekit validate BUNDLE --local`: run the bundle's golden inputs through the IREE runtime on
this machine (the same iree-run-module a device uses) and compare with the golden outputs."""

from __future__ import annotations

import time
from pathlib import Path

from edgekit.config.profiles import host_arch
from edgekit.errors import CannotRunHere, ToolError
from edgekit.models.bundle import Bundle, load_bundle
from edgekit.models.report import ValidationReport
from edgekit.toolchain import iree
from edgekit.toolchain.runner import scratch_dir
from edgekit.validate.compare import compare_output_files
from edgekit.validate.folded import refuse_disagreeing
from edgekit.validate.outputs import output_file
from edgekit.validate.samples import worst_per_output


def host_cannot_run(bundle: Bundle) -> str | None:
    """Why this machine cannot execute the bundle, or None when it can (or may)."""
    m = bundle.manifest
    if m.backend == "none":
        return f"the bundle for {m.target} has no module (an NPU artifact and estimates only)"
    if m.backend == "llvm-cpu" and m.arch != host_arch():
        return (f"the bundle is compiled for {m.arch} ({m.target}) and this machine is "
                f"{host_arch()}")
    return None


def validate_local(path: str | Path) -> ValidationReport:
    with load_bundle(path) as bundle:
        return _validate(bundle)


def _validate(bundle: Bundle) -> ValidationReport:
    bundle.verify()
    refuse_disagreeing(bundle)    # a sample the module would ignore part of
    reason = host_cannot_run(bundle)
    if reason:
        npu_only = bundle.manifest.backend == "none"
        raise CannotRunHere(reason, where=str(bundle.path),
                            hint="its numbers were proven at build time on the TOSA reference "
                                 "model (manifest `npu`)" if npu_only else
                            "deploy it to a device of that kind (`edgekit deploy`) or build "
                            "for `--target host`")
    m = bundle.manifest
    reports = []
    for function, inputs, golden in m.sample_sets():
        started = time.perf_counter()
        with scratch_dir("validate") as scratch:
            outputs = [scratch / output_file(i, sig.dtype) for i, sig in enumerate(m.outputs)]
            try:
                iree.run_module(bundle.module, m.runtime_driver, function,
                                [bundle.file(p) for p in inputs], outputs,
                                threads=m.runtime_threads)
            except ToolError as exc:
                if m.runtime_driver == "vulkan" and _no_vulkan_device(exc.stderr_tail):
                    raise CannotRunHere("this machine has no Vulkan device",
                                        where=str(bundle.path),
                                        hint="install a Vulkan driver (e.g. Mesa's llvmpipe: "
                                             "apt-get install mesa-vulkan-drivers)") from None
                raise
            reports.append(compare_output_files(bundle, outputs, "host",
                                                time.perf_counter() - started, golden))
    return worst_per_output(reports)


def _no_vulkan_device(stderr: str) -> bool:
    text = stderr.lower()
    return any(s in text for s in ("no vulkan", "vk_error_incompatible_driver",
                                   "no devices found", "unavailable", "libvulkan"))
