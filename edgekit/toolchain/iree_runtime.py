"""IREE's Python runtime in this process: a HAL device per driver and thread count, and a
module loaded on it behind the lean call path (`LeanCall`).

Shared by the in-process runner (`edgekit.compile`, the Python API) and `edgekit tune`, which
measures candidates here exactly as such a runner calls them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from edgekit.errors import EdgekitError

_DEVICES: dict[tuple[str, int | None], object] = {}


def hal_device(driver: str, threads: int | None = None):
    """The HAL device a module runs on: `local-task` with `threads` workers (None: IREE's default
    topology), `local-sync`, `vulkan`. One device per (driver, threads), kept for the process:
    every local-task device starts its own workers, and idle workers of extra devices would
    compete for the cores. IREE reads the topology from its flags when a device is created
    (measured: devices made after `--task_topology_group_count=1` and `=2` start 1 and 2
    workers), so the flag is set right before."""
    import iree.runtime as rt
    key = (driver, threads if driver == "local-task" else None)
    device = _DEVICES.get(key)
    if device is None:
        try:
            if key[1] is not None:
                rt.flags.parse_flags(f"--task_topology_group_count={threads}")
                device = rt.get_device(driver, cache=False)
            else:
                device = rt.get_device(driver)
        except (RuntimeError, ValueError) as exc:
            raise EdgekitError(f"IREE runtime: cannot create a {driver} device: {exc}",
                               hint="the runtime wheel's drivers: local-sync, local-task, "
                                    "vulkan, cuda, hip") from None
        _DEVICES[key] = device
    return device


class InProcessModule:
    """A .vmfb loaded (mmap) into a context of its own on `hal_device(driver, threads)`; called
    with numpy arrays, returns numpy arrays. `close()` drops the runtime objects (before the
    interpreter tears down, else nanobind reports them leaked)."""

    def __init__(self, module: Path, driver: str, entry: str, threads: int | None = None):
        import iree.runtime as rt
        self.driver, self.threads = driver, threads
        device = hal_device(driver, threads)
        config = rt.Config(device=device)
        try:
            self._context = rt.SystemContext(config=config)
            self._context.add_vm_module(rt.VmModule.mmap(config.vm_instance, str(module)))
            self._function = self._context.modules.module[entry]
        except (RuntimeError, ValueError, KeyError, OSError) as exc:
            raise EdgekitError(f"IREE runtime cannot load {module.name}: {exc}",
                               where=str(module)) from None
        self._call = LeanCall.bind(rt, self._context, device, self._function)

    @property
    def lean(self) -> bool:
        """Calls take the lean path (flat tensor signature)."""
        return self._call is not None

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        try:
            if self._call is not None:
                return self._call(arrays)
            result = self._function(*arrays)
        except (RuntimeError, ValueError) as exc:
            raise EdgekitError(f"IREE runtime: the call failed: {exc}") from None
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        return [np.array(o.to_host()) for o in outputs]

    def close(self) -> None:
        self._call = self._function = self._context = None


class LeanCall:
    """One module function, bound once: numpy arrays → HAL buffer views → `VmContext.invoke` →
    host arrays, without the FunctionInvoker's per-call ABI walk and DeviceArray wrappers
    (bench/call_overhead.py: ~17 → ~7 µs for one add on 1×16).

    Inputs are copied into device buffers (`allocate_buffer_copy`; on local-* drivers a
    memcpy): IREE 3.13's zero-copy `HalAllocator.import_host_allocation` of a numpy array
    crashed the process here, so it is not used. VmVariantList has no clear(), so a fresh pair
    of lists per call (two small allocations) is the reuse the binding allows."""

    def __init__(self, rt, vm_context, device, vm_function, results: int):
        self._rt, self._invoke, self._function = rt, vm_context.invoke, vm_function
        self._device, self._allocator = device, device.allocator
        self._memory, self._usage = rt.MemoryType.DEVICE_LOCAL, rt.BufferUsage.DEFAULT
        self._results = results
        self._element_types: dict[np.dtype, object] = {}
        self._dtypes: dict[object, np.dtype] = {}

    @classmethod
    def bind(cls, rt, context, device, function) -> "LeanCall | None":
        """None when the function's ABI is not flat tensors in and out (nested lists, scalars,
        or no reflection): then the FunctionInvoker's general path is used."""
        vm_function = function.vm_function
        counts = _flat_tensor_signature(vm_function.reflection)
        if counts is None:
            return None
        return cls(rt, context.vm_context, device, vm_function, counts[1])

    def _element_type(self, dtype: np.dtype):
        et = self._element_types.get(dtype)
        if et is None:
            from iree.runtime.array_interop import map_dtype_to_element_type
            et = self._element_types[dtype] = map_dtype_to_element_type(dtype)
        return et

    def __call__(self, arrays) -> list[np.ndarray]:
        rt = self._rt
        args = rt.VmVariantList(len(arrays))
        for a in arrays:
            a = np.ascontiguousarray(a)
            view = self._allocator.allocate_buffer_copy(
                memory_type=self._memory, allowed_usage=self._usage, device=self._device,
                buffer=a, element_type=self._element_type(a.dtype))
            args.push_ref(view.ref)
        rets = rt.VmVariantList(self._results)
        self._invoke(self._function, args, rets)
        out = []
        for i in range(self._results):
            view = rets.get_as_object(i, rt.HalBufferView)
            et = view.element_type
            dtype = self._dtypes.get(et)
            if dtype is None:
                dtype = self._dtypes[et] = np.dtype(rt.HalElementType.map_to_dtype(et))
            # copied out of the mapping: the result outlives the buffer view
            out.append(view.map().asarray(view.shape, dtype).copy())
        return out


_DECLARATION = re.compile(r"\((.*)\)\s*->\s*\((.*)\)\s*$")
_OPERAND = re.compile(r"%\w+\s*:\s*([^,]+?)(?=,\s*%|$)")


def _flat_tensor_signature(reflection: dict) -> tuple[int, int] | None:
    """(arguments, results) when every one is a tensor, from the function's reflection:
    IREE's `iree.abi` descriptors, or the `iree.abi.declaration` torch-mlir's modules carry
    ("sync func @main(%input0: tensor<1x16xf32>) -> (%output0: tensor<1x16xf32>)")."""
    if "iree.abi" in reflection:
        try:
            descs = json.loads(reflection["iree.abi"])
            args, rets = descs["a"], descs["r"]
        except (ValueError, KeyError, TypeError):
            return None
        if all(isinstance(d, list) and d and d[0] == "ndarray" for d in [*args, *rets]):
            return len(args), len(rets)
        return None
    match = _DECLARATION.search(reflection.get("iree.abi.declaration", ""))
    if match is None:
        return None
    sides = [_OPERAND.findall(side) for side in match.groups()]
    if not sides[1] or not all(t.strip().startswith("tensor<") for side in sides for t in side):
        return None
    return len(sides[0]), len(sides[1])


__all__ = ["hal_device", "InProcessModule", "LeanCall"]
