"""Where a compiled graph runs: in this process (IREE's Python runtime), through the
iree-run-module tool here (Vulkan: the Python runtime cannot read results back from software
Vulkan, facts.md), or on a remote device over the deploy machinery. Each keeps call statistics.
"""

from __future__ import annotations

import atexit
import logging
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgekit.config.profiles import host_arch
from edgekit.device import layout
from edgekit.device.deploy import DeployResult, deploy_bundle
from edgekit.errors import EdgekitError
from edgekit.models.bundle import Bundle
from edgekit.toolchain import iree
from edgekit.toolchain.iree_runtime import (  # noqa: F401 (LeanCall: bench/call_overhead.py)
    InProcessModule, LeanCall, _flat_tensor_signature)
from edgekit.transport import open_device
from edgekit.transport.base import Transport
from edgekit.validate.outputs import (as_declared, output_byte_cap, output_file, read_output,
                                      static_nbytes)

log = logging.getLogger("edgekit.compile")

# What a remote graph's output of a dynamic shape may be at most (the device is not trusted:
# every download has a cap; a static shape's is its own size)
DYNAMIC_OUTPUT_MAX_BYTES = 256 << 20


@dataclass
class CallStats:
    graph: int
    where: str
    calls: int = 0
    total_s: float = 0.0
    last_s: float = 0.0

    def record(self, seconds: float) -> None:
        self.calls += 1
        self.total_s += seconds
        self.last_s = seconds
        log.info("graph %d on %s: %.2f ms", self.graph, self.where, seconds * 1e3)

    def as_dict(self) -> dict:
        mean = self.total_s / self.calls if self.calls else 0.0
        return {"graph": self.graph, "where": self.where, "calls": self.calls,
                "mean_ms": round(mean * 1e3, 3), "last_ms": round(self.last_s * 1e3, 3)}


_ALL_STATS: list[CallStats] = []
_IN_PROCESS: list["InProcessRunner"] = []


def call_stats() -> list[dict]:
    """Per compiled graph variant: where it runs, how often it ran, mean and last latency."""
    return [s.as_dict() for s in _ALL_STATS]


@dataclass
class Runner:
    """Runs one compiled module: numpy arrays in, numpy arrays out, timed."""

    stats: CallStats
    description: str = field(default="")

    declared: tuple[str, ...] = field(default=())   # the manifest's output dtypes

    def run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        started = time.perf_counter()
        outputs = self._run(arrays)
        self.stats.record(time.perf_counter() - started)
        # IREE's integers are signless: a uint8 result comes back labelled int8
        return [as_declared(o, d) for o, d in zip(outputs, self.declared)] + \
            outputs[len(self.declared):]

    def _run(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError


class InProcessRunner(Runner):
    """The module in this process (toolchain/iree_runtime.py), on the bundle's driver with the
    thread count `edgekit tune` measured it at (untuned: IREE's default topology): the
    configuration the tuner's in-process measurement ranks candidates in."""

    def __init__(self, bundle: Bundle, stats: CallStats):
        m = bundle.manifest
        threads = m.tuning.threads if m.tuning is not None else None
        super().__init__(stats, f"iree.runtime in this process, driver {m.runtime_driver}"
                         + (f", {threads} thread(s)" if threads else ""))
        self.bundle = bundle
        self._module = InProcessModule(bundle.module, m.runtime_driver, m.entry_function,
                                       threads)
        _IN_PROCESS.append(self)

    def release(self) -> None:
        if self._module is not None:
            self._module.close()
            self._module = None

    def _run(self, arrays):
        return self._module(arrays)


class ToolRunner(Runner):
    def __init__(self, bundle: Bundle, stats: CallStats):
        super().__init__(stats, f"iree-run-module here, driver {bundle.manifest.runtime_driver}")
        self._bundle = bundle

    def _run(self, arrays):
        m = self._bundle.manifest
        with tempfile.TemporaryDirectory(prefix="edgekit-call-") as tmp:
            inputs = [Path(tmp) / f"input_{i}.npy" for i in range(len(arrays))]
            outputs = [Path(tmp) / output_file(i, o.dtype) for i, o in enumerate(m.outputs)]
            for path, array in zip(inputs, arrays):
                np.save(path, array, allow_pickle=False)
            iree.run_module(self._bundle.module, m.runtime_driver, m.entry_function, inputs,
                            outputs, threads=m.runtime_threads)
            return read_outputs(outputs, m)


_CONNECTIONS: dict[str, Transport] = {}
_REMOTE_SCRATCH: list[tuple[Transport, str]] = []


def _connection(host: str, identity: str | None) -> Transport:
    if host not in _CONNECTIONS:
        _CONNECTIONS[host] = open_device(host, Path(identity) if identity else None)
    return _CONNECTIONS[host]


@atexit.register
def _release_everything() -> None:
    """Close device connections and drop IREE runtime objects before the interpreter tears
    down (else nanobind reports them as leaked)."""
    for conn, directory in _REMOTE_SCRATCH:
        try:
            conn.run(["rm", "-rf", "--", directory], check=False, timeout=30)
        except (EdgekitError, OSError):  # best effort at exit: the device may be gone
            pass
    _REMOTE_SCRATCH.clear()
    for conn in _CONNECTIONS.values():
        conn.close()
    _CONNECTIONS.clear()
    for runner in _IN_PROCESS:
        runner.release()
    _IN_PROCESS.clear()


class RemoteRunner(Runner):
    """Deploys the graph's bundle to the device (validated there against eager outputs), then
    per call ships inputs over SFTP, runs iree-run-module on the device, fetches outputs."""

    def __init__(self, bundle: Bundle, host: str, identity: str | None, stats: CallStats):
        self._conn = _connection(host, identity)
        self.deployed: DeployResult = deploy_bundle(self._conn, bundle)
        super().__init__(stats, f"iree-run-module on {self._conn.where}")
        m = bundle.manifest
        self._manifest = m
        self._release = layout.release_dir(m.app, self.deployed.release)
        arch = self._conn.run(["uname", "-m"]).text.strip()
        self._tool = f"{layout.runtime_dir(m.compiler_version, arch)}/bin/iree-run-module"
        # one scratch directory per runner, reused by every call (fewer round trips per call)
        self._call_dir = f"{layout.app_dir(m.app)}/.calls-{secrets.token_hex(4)}"
        self._conn.mkdirs(self._call_dir)
        _REMOTE_SCRATCH.append((self._conn, self._call_dir))

    def _run(self, arrays):
        m, call_dir = self._manifest, self._call_dir
        with tempfile.TemporaryDirectory(prefix="edgekit-call-") as tmp:
            inputs = []
            for i, array in enumerate(arrays):
                local = Path(tmp) / f"input_{i}.npy"
                np.save(local, array, allow_pickle=False)
                self._conn.put(local, f"{call_dir}/input_{i}.npy")
                inputs.append(f"{call_dir}/input_{i}.npy")
            names = [output_file(i, o.dtype) for i, o in enumerate(m.outputs)]
            outputs = [f"{call_dir}/{name}" for name in names]
            self._conn.run(iree.run_module_argv(
                f"{self._release}/module.vmfb", m.runtime_driver, m.entry_function, inputs,
                outputs, tool=self._tool, threads=m.runtime_threads),
                what="running the graph on the device")
            for name, remote, o in zip(names, outputs, m.outputs):
                nbytes = static_nbytes(o.shape, o.dtype)   # a dynamic shape: the fallback cap
                self._conn.get(remote, Path(tmp) / name, max_bytes=output_byte_cap(
                    DYNAMIC_OUTPUT_MAX_BYTES if nbytes is None else nbytes))
            return read_outputs([Path(tmp) / name for name in names], m)


def read_outputs(paths: list[Path], manifest) -> list[np.ndarray]:
    """Output files as the manifest declares them (validate/outputs.py)."""
    try:
        return [read_output(p, o.dtype, o.shape) for p, o in zip(paths, manifest.outputs)]
    except ValueError as exc:
        raise EdgekitError(f"cannot read a graph's output: {exc}",
                           where=manifest.app) from None


def make_runner(bundle: Bundle, graph: int, device: str | None, identity: str | None) -> Runner:
    m = bundle.manifest
    if device:
        stats = CallStats(graph, device)
        runner: Runner = RemoteRunner(bundle, device, identity, stats)
    elif m.backend == "llvm-cpu" and m.arch == host_arch():
        stats = CallStats(graph, "host")
        runner = InProcessRunner(bundle, stats)
    else:
        stats = CallStats(graph, "host (iree-run-module)")
        runner = ToolRunner(bundle, stats)
    runner.declared = tuple(o.dtype for o in m.outputs)
    _ALL_STATS.append(stats)
    return runner
