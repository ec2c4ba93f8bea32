"""ONNX models as a source: safe loading (external data only from the model's own directory),
old opsets upgraded, the input signature in the types a .npy and IREE share, and golden outputs
from a reference that always exists: onnxruntime with graph optimizations disabled (the exact
reference, not an optimized approximation of it) where it runs the model, else the onnx
package's own `onnx.reference.ReferenceEvaluator`."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from edgekit.errors import ModelLoadError

MIN_OPSET = 7        # what onnx.version_converter upgrades from
# torch-mlir's ONNX importer (and so IREE's ONNX input) lowers many ops only from a newer version
# than their first (opset-9 MaxPool and BatchNormalization are `torch.operator`s it leaves
# unlowered); onnx.version_converter to 17 made all 14 opset-9 zoo models tried here build.
UPGRADE_TO = 17
# Below this a model whose conversion fails is refused; from it, it is kept as it is (most ops
# the importer lowers are there already) and the build says so.
KEEP_UNCONVERTED_FROM = 13


def load_onnx(path: Path, notes: list[str] | None = None):
    """The model at `path`, checked, upgraded to opset UPGRADE_TO when older (what was done
    is appended to `notes`), with shapes inferred as IREE's importer infers them
    (`data_prop=True`: shapes computed from constant shape arithmetic)."""
    import onnx
    from onnx.external_data_helper import uses_external_data
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises DecodeError & co.
        raise ModelLoadError(f"not a readable ONNX model: {_line(exc)}", where=str(path)) \
            from None
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
    try:
        onnx.checker.check_model(model)   # before the upgrade: its failures are the model's
        model = _upgraded(model, str(path), notes if notes is not None else [])
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
        raise ModelLoadError(f"invalid ONNX model: {_line(exc)}", where=str(path)) from None


def opset_of(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _upgraded(model, where: str, notes: list[str]):
    import onnx
    opset = opset_of(model)
    if opset >= UPGRADE_TO or not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        return model       # new enough, or no standard ops (e.g. only ai.onnx.ml) to upgrade
    if opset < MIN_OPSET and _defined_as_in(model, opset, UPGRADE_TO):
        notes.append(f"opset {opset} kept: onnx.version_converter does not upgrade it, and "
                     f"its operators are defined as in opset {UPGRADE_TO}")
        return model
    if opset < MIN_OPSET:
        raise ModelLoadError(f"opset {opset} is older than {MIN_OPSET}, the oldest "
                             "onnx.version_converter upgrades", where=where,
                             hint=f"re-export the model at opset {UPGRADE_TO} or newer")
    try:
        converted = onnx.version_converter.convert_version(model, UPGRADE_TO)
    except Exception as exc:  # the converter raises RuntimeError, IndexError, ValidationError
        reason = _line(exc)
        if opset < KEEP_UNCONVERTED_FROM and not _defined_as_in(model, opset, UPGRADE_TO):
            raise ModelLoadError(
                f"opset {opset} is too old for the importer and onnx.version_converter cannot "
                f"upgrade it to {UPGRADE_TO}: {reason}", where=where,
                hint=f"re-export the model at opset {UPGRADE_TO} or newer") from None
        notes.append(f"opset {opset} kept: onnx.version_converter could not upgrade it to "
                     f"{UPGRADE_TO} ({reason})")
        return model
    notes.append(f"opset {opset} upgraded to {UPGRADE_TO} by onnx.version_converter")
    return converted


def _defined_as_in(model, opset: int, newer: int) -> bool:
    """Every standard operator of the model (subgraphs included) has the same definition at
    `opset` as at `newer`: the model means the same there, no upgrade needed (opset-1 Not)."""
    import onnx

    def nodes(graph):
        for node in graph.node:
            yield node
            for attr in node.attribute:
                if attr.HasField("g"):
                    yield from nodes(attr.g)
                for sub in attr.graphs:
                    yield from nodes(sub)
    for node in nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            old = onnx.defs.get_schema(node.op_type, opset, "").since_version
            new = onnx.defs.get_schema(node.op_type, newer, "").since_version
        except onnx.defs.SchemaError:
            return False
        if old != new:
            return False
    return True


def _initializers(model):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t


def _line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's text, without onnxruntime's '[ONNXRuntimeError] : 2 :
    INVALID_ARGUMENT :' prefix and cut to `limit` characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if text.startswith("[ONNXRuntimeError]"):
        text = text.split(" : ", 3)[-1]
    # "Non-zero status code returned while running Tile node. Name:'' Status Message: …"
    text = re.sub(r"Non-zero status code returned while running (\w+) node\. "
                  r"Name:'[^']*' Status Message: ", r"\1: ", text)
    text = _without_cpp_signature(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _without_cpp_signature(text: str) -> str:
    """onnxruntime's 'Load model from m.onnx failed:/onnxruntime_src/….cc:256
    onnxruntime::Model::Model(onnx::ModelProto&&, …) Unsupported model IR version: 14, …' as
    'Unsupported model IR version: 14, …' (the C++ source line and signature say nothing to a
    user)."""
    found = re.search(r"(?:Load model from \S+ failed:)?/onnxruntime_src/\S+:\d+ [^(\s]*\(", text)
    if not found:
        return text
    depth, end = 1, found.end()
    while end < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        end += 1
    return (text[:found.start()] + text[end:].lstrip()).strip() or text


# --- types -------------------------------------------------------------------------------------

# Element types a .npy cannot hold as IREE lays them out, and why (the others map to numpy's or
# ml_dtypes' dtype of the same name through onnx.helper).
_REFUSED = {
    "STRING": "IREE has no string tensors",
    "COMPLEX64": "IREE's ONNX input does not take complex tensors",
    "COMPLEX128": "IREE's ONNX input does not take complex tensors",
    "FLOAT8E8M0": "IREE's ONNX input has no float8 e8m0 type",
}
_PACKED = ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2")


def element_dtype(elem_type: int, what: str, where: str) -> str:
    """The numpy dtype name of an ONNX element type; a type edgekit cannot feed the module or
    read back is a one-line ModelLoadError naming `what` (e.g. "input 'x'")."""
    from onnx import TensorProto, helper
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() \
        else str(elem_type)
    if name in _PACKED:
        reason = (f"IREE packs {name.lower()} elements several to a byte and a .npy holds one "
                  "per byte")
    elif name == "UNDEFINED":
        reason = "the model does not say its element type"
    else:
        reason = _REFUSED.get(name, "")
    if not reason:
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
        except (KeyError, TypeError, ValueError):
            reason = "numpy has no such type"
    raise ModelLoadError(f"{what} is of type {name.lower()}, which edgekit cannot take: {reason}",
                         where=where, hint="change the model so that it takes or gives a "
                         "numeric type (e.g. a Cast at the graph boundary)")


def _value_kind(value) -> str:
    which = value.type.WhichOneof("value")
    return {"sequence_type": "a sequence", "optional_type": "an optional",
            "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}.get(
        which or "", "of no declared type")


def onnx_inputs(model, where: str = "model inputs"
                ) -> list[tuple[str, tuple[int | str, ...], str]]:
    """(name, shape, numpy dtype) of each real input (not an initializer); a dim_param or an
    unknown size stays a string. Inputs that are no tensor or of a type edgekit cannot take
    are a one-line ModelLoadError."""
    initializers = {t.name for t in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.type.WhichOneof("value") != "tensor_type":
            raise ModelLoadError(
                f"input {value.name!r} is {_value_kind(value)}, which edgekit cannot take "
                "(inputs are tensors)", where=where,
                hint="give the model tensor inputs (e.g. unpack the sequence in the graph)")
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                      for d in tensor.shape.dim)
        found.append((value.name, shape,
                      element_dtype(tensor.elem_type, f"input {value.name!r}", where)))
    return found


def check_outputs(model, where: str = "model outputs") -> None:
    """Every graph output is a tensor of a type edgekit reads back (a one-line refusal
    otherwise)."""
    for value in model.graph.output:
        if value.type.WhichOneof("value") != "tensor_type":
            raise ModelLoadError(f"output {value.name!r} is {_value_kind(value)}, which edgekit "
                                 "cannot give back (outputs are tensors)", where=where,
                                 hint="make the model return tensors")
        element_dtype(value.type.tensor_type.elem_type, f"output {value.name!r}", where)


def onnx_digest(model) -> str:
    return hashlib.sha256(model.SerializeToString()).hexdigest()


# --- the reference -----------------------------------------------------------------------------

class ReferenceFailed(ModelLoadError):
    """Neither onnxruntime nor the onnx reference evaluator ran the model on a sample."""


def run_onnxruntime(model, names: tuple[str, ...], samples: tuple[np.ndarray, ...]
                    ) -> tuple[np.ndarray, ...]:
    return onnxruntime_runner(model, names)(samples)


def onnxruntime_runner(model, names: tuple[str, ...]):
    """One onnxruntime session for the model (graph optimizations off, 1 thread), as a function
    from a sample (arrays in `names` order) to the outputs."""
    import onnxruntime as ort
    try:
        run = _onnxruntime(model, names)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ModelLoadError(f"onnxruntime cannot run the model: {_line(exc)}",
                             where="golden outputs",
                             hint=f"onnxruntime {ort.__version__} gives the reference outputs; "
                                  "re-save the model with an IR version and opset it supports"
                             ) from None

    def checked(samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        try:
            return run(samples)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelLoadError(f"onnxruntime cannot run the model: {_line(exc)}",
                                 where="golden outputs") from None
    return checked


def _onnxruntime(model, names: tuple[str, ...]):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 4   # fatal only: its failures come back as exceptions
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4

    def run(samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return _plain(session.run(None, dict(zip(names, samples)), quiet))
    return run


def _evaluator(model, names: tuple[str, ...]):
    from onnx.reference import ReferenceEvaluator
    evaluator = ReferenceEvaluator(model)

    def run(samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return _plain(evaluator.run(None, dict(zip(names, samples))))
    return run


def _lowest_written(outputs) -> bool:
    return any(o.dtype.kind == "f" and o.size and (o == np.finfo(o.dtype).min).any()
               for o in outputs)


def _plain(outputs) -> tuple[np.ndarray, ...]:
    # np.require keeps 0-d outputs 0-d (np.ascontiguousarray would make them [1])
    return tuple(np.require(np.asarray(o), requirements="C") for o in outputs)


class Reference:
    """The golden outputs' reference, called with a sample (arrays in input order):
    onnxruntime where it runs the model, else (an IR version or opset newer than it takes, an
    op it lacks, a sample it refuses) the onnx package's ReferenceEvaluator. `name` says which
    computed the outputs so far, with versions. `random_inputs`: the inputs edgekit made up,
    named when both fail (their random values are then the likely cause)."""

    def __init__(self, model, names: tuple[str, ...], random_inputs: tuple[str, ...] = ()):
        import onnx
        import onnxruntime as ort
        self._model, self._names, self._random = model, names, random_inputs
        self._ort_name = f"onnxruntime {ort.__version__}"
        self._evaluator_name = f"onnx.reference.ReferenceEvaluator (onnx {onnx.__version__})"
        self._evaluator = None
        self._fell_back: list[str] = []   # why onnxruntime refused, per sample it refused
        self._ort_ran = 0
        self._spec_masks = any(n.op_type == "Attention" and n.domain in ("", "ai.onnx")
                               for n in model.graph.node)
        try:
            self._ort = _onnxruntime(model, names)
            self._refused = ""
        except Exception as exc:  # onnxruntime raises its own exception types
            self._ort, self._refused = None, _line(exc, 150)

    @property
    def name(self) -> str:
        if self._ort is None:
            return f"{self._evaluator_name} (onnxruntime refused the model: {self._refused})"
        if not self._fell_back:
            return self._ort_name
        return (f"{self._evaluator_name} for {len(self._fell_back)} sample(s) onnxruntime "
                f"{self._fell_back[0]}"
                + (f"; {self._ort_name} for {self._ort_ran}" if self._ort_ran else ""))

    def __call__(self, samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        if self._ort is None:
            return self._evaluate(samples, self._refused)
        try:
            outputs = self._ort(samples)
        except Exception as exc:  # onnxruntime raises its own exception types
            reason = _line(exc, 150)
            outputs = self._evaluate(samples, reason)
            self._fell_back.append(f"refused ({reason})")
            return outputs
        if self._spec_masks and _lowest_written(outputs):
            # onnxruntime's Attention masks scores with the float's lowest value where the
            # spec (and a module built from its body) writes -inf: the spec's evaluator decides
            reason = ("answered unlike the spec (its Attention writes the float's lowest "
                      "value for masked scores, the spec -inf)")
            try:
                spec = self._evaluate(samples, reason)
            except ReferenceFailed:     # onnxruntime's outputs, then
                spec = None
            if spec is not None:
                self._fell_back.append(reason)
                return spec
        self._ort_ran += 1
        return outputs

    def _evaluate(self, samples, ort_reason: str) -> tuple[np.ndarray, ...]:
        try:
            if self._evaluator is None:
                self._evaluator = _evaluator(self._model, self._names)
            return self._evaluator(samples)
        except Exception as exc:  # the evaluator's ops raise whatever numpy raises
            hint = ("edgekit made up the values of " + ", ".join(repr(n) for n in self._random)
                    + " at random and they may be outside what the model accepts: give real "
                    "inputs in `samples:` (a .npz, one array per input name)") \
                if self._random else "check the samples against what the model expects"
            raise ReferenceFailed(f"no reference runs the model: onnxruntime: {ort_reason}; "
                                  f"reference evaluator: {_line(exc, 150)}",
                                  where="golden outputs", hint=hint) from None
