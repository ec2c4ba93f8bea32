"""ONNX models as a source: safe loading (external data only from the model's own directory),
the input signature, and golden outputs from onnxruntime with graph optimizations disabled (the
exact reference, not an optimized approximation of it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from edgekit.errors import ModelLoadError

MIN_OPSET = 7   # what torch-mlir's ONNX importer lowers from


def load_onnx(path: Path):
    import onnx
    from onnx.external_data_helper import uses_external_data
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError & co.
        raise ModelLoadError(f"not a readable ONNX model: {exc}", where=str(path)) from None
    base = path.parent.resolve()
    for tensor in _initializers(model):
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            target = (base / location).resolve()
            if not target.is_relative_to(base):
                raise ModelLoadError(
                    f"external data of tensor {tensor.name!r} points outside the model's "
                    f"directory ({location!r}); refused", where=str(path),
                    hint="keep external data files beside the .onnx file")
    onnx.load_external_data_for_model(model, str(base))
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    if opset < MIN_OPSET:
        raise ModelLoadError(f"opset {opset} is older than {MIN_OPSET}", where=str(path),
                             hint="convert it: onnx.version_converter.convert_version(model, 17)")
    try:
        onnx.checker.check_model(model)
        return onnx.shape_inference.infer_shapes(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ModelLoadError(f"invalid ONNX model: {str(exc).splitlines()[0]}",
                             where=str(path)) from None


def _initializers(model):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t


def onnx_inputs(model) -> list[tuple[str, tuple[int | str, ...], str]]:
    """(name, shape, numpy dtype) of each real input (not an initializer); a dim_param or an
    unknown size stays a string."""
    from onnx import helper
    initializers = {t.name for t in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                      for d in tensor.shape.dim)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
        found.append((value.name, shape, dtype))
    return found


def onnx_digest(model) -> str:
    return hashlib.sha256(model.SerializeToString()).hexdigest()


def run_onnxruntime(model, names: tuple[str, ...], samples: tuple[np.ndarray, ...]
                    ) -> tuple[np.ndarray, ...]:
    return onnxruntime_runner(model, names)(samples)


def onnxruntime_runner(model, names: tuple[str, ...]):
    """One onnxruntime session for the model (graph optimizations off, 1 thread), as a function
    from a sample (arrays in `names` order) to the outputs."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1

    def failed(exc: Exception) -> ModelLoadError:
        return ModelLoadError(f"onnxruntime cannot run the model: {str(exc).splitlines()[0]}",
                              where="golden outputs",
                              hint=f"onnxruntime {ort.__version__} gives the reference outputs; "
                                   "re-save the model with an IR version and opset it supports")
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise failed(exc) from None

    def run(samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        try:
            outputs = session.run(None, dict(zip(names, samples)))
        except Exception as exc:  # onnxruntime raises its own exception types
            raise failed(exc) from None
        return tuple(np.ascontiguousarray(o) for o in outputs)
    return run
