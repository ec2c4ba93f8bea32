"""Random samples for an ONNX graph that respect what each input means where the graph says it.

Uniform random numbers are fine for data, wrong for an input that indexes, names axes or sets
a shape: onnxruntime refuses `Gather` indices past the indexed dimension, a random `Reshape`
shape, a random `Resize` scale. So each graph input is looked up where the graph reads it:
indices are drawn within the dimension they index, axes within the rank (distinct), integer
divisors non-zero, and an input that sets a shape or a size is refused with a request for real
values in `samples:` (there is no meaningful random value for it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from edgekit.errors import ModelLoadError


@dataclass(frozen=True)
class Role:
    """What an input means to the node that reads it."""

    kind: str                       # "index" | "axes" | "nonzero" | "shape" | "zero_point"
    op: str                         # the reading node's op type (for messages)
    data: str = ""                  # index/axes: the tensor they index into
    axis: int = 0                   # index: the dimension indexed
    nd: int = -1                    # index: >= 0 for GatherND-style (last axis = coordinates
                                    # of data dims nd, nd+1, …)
    low: int = 0                    # index: first value (ReverseSequence lengths start at 1)
    extra: int = 0                  # index: high = dim + extra


# (op type, input position) → how the input is read. Axis attributes default as in the spec.
_INDEX = {("Gather", 1): "axis", ("GatherElements", 1): "axis", ("ScatterElements", 1): "axis",
          ("Scatter", 1): "axis", ("GatherND", 1): "nd", ("ScatterND", 1): "nd",
          ("RoiAlign", 2): "batch", ("OneHot", 0): "depth", ("ReverseSequence", 1): "seq",
          ("MaxUnpool", 1): "flat", ("NegativeLogLikelihoodLoss", 1): "class",
          ("SoftmaxCrossEntropyLoss", 1): "class"}
_AXES = {("CumSum", 1), ("CumProd", 1)} | {(op, 1) for op in (
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")}
_NONZERO = {("Div", 1), ("Mod", 1)}
# A float8 or 4-bit quantization's zero point is 0 in practice ("usually not used", the ONNX
# spec says); runtimes differ on whether a made-up nonzero one applies. Integer ones stay random.
_ZERO_POINT = {("DequantizeLinear", 2), ("QuantizeLinear", 2)}
_SHAPE = {("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Resize", 1), ("Resize", 2),
          ("Resize", 3), ("Upsample", 1), ("Split", 1), ("Pad", 1), ("Pad", 3), ("Slice", 1),
          ("Slice", 2), ("Slice", 3), ("Slice", 4), ("TopK", 1), ("ConstantOfShape", 0),
          ("Range", 0), ("Range", 1), ("Range", 2), ("Squeeze", 1), ("Unsqueeze", 1),
          ("OneHot", 1), ("CenterCropPad", 1), ("Col2Im", 1), ("Col2Im", 2), ("AffineGrid", 1),
          ("MaxUnpool", 2), ("BlackmanWindow", 0), ("HannWindow", 0), ("HammingWindow", 0),
          ("DFT", 1), ("DFT", 2), ("STFT", 1), ("STFT", 3), ("MelWeightMatrix", 0),
          ("MelWeightMatrix", 1), ("MelWeightMatrix", 2), ("NonMaxSuppression", 2)}
# Scatters with repeated indices write one place twice: which write wins is unspecified, so the
# module and the reference may both be right and still differ. Their indices are drawn distinct.
_DISTINCT = {"ScatterElements", "Scatter", "ScatterND"}
# Ops that pass their first input's values on unchanged (only moved or retyped): an index that
# reaches an indexer through them is still an index (NLLLoss expanded: target → Unsqueeze →
# GatherElements).
_CARRIERS = {"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose",
             "Expand"}
# Where passes either branch's values on (NLLLoss expanded with ignore_index: target → Where(
# target == ignore_index, 0, target) → GatherElements).
_CARRIED_AT = {("Where", 1), ("Where", 2)}


def input_roles(model) -> dict[str, Role]:
    """The role of each graph input some node reads as indices, axes, a divisor or a shape
    (the first such reader decides; a shape role wins over the others)."""
    inputs = {v.name for v in model.graph.input} - {t.name for t in model.graph.initializer}
    readers: dict[str, list] = {}
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            for position, name in enumerate(node.input):
                readers.setdefault(name, []).append((node, position))
    roles: dict[str, Role] = {}
    for name in inputs:
        reached, frontier = {name}, [name]
        for _ in range(4):              # carriers followed up to 4 deep
            following = []
            for tensor in frontier:
                for node, position in readers.get(tensor, ()):
                    role = _role(node, position)
                    # GatherND-style coordinates lie along the last axis: only when read as is
                    carried = role and (tensor == name or role.nd < 0)
                    if carried and (name not in roles or role.kind == "shape"):
                        roles[name] = role
                    if ((node.op_type in _CARRIERS and position == 0)
                            or (node.op_type, position) in _CARRIED_AT):
                        following += [o for o in node.output if o not in reached]
            reached.update(following)
            frontier = following
    return roles


def _attr(node, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _role(node, position: int) -> Role | None:
    key = (node.op_type, position)
    op = node.op_type
    if key in _SHAPE:
        return Role("shape", op)
    if key in _AXES:
        return Role("axes", op, data=node.input[0])
    if key in _NONZERO:
        return Role("nonzero", op)
    if key in _ZERO_POINT:
        return Role("zero_point", op)
    how = _INDEX.get(key)
    if how == "axis":
        return Role("index", op, data=node.input[0], axis=_attr(node, "axis", 0))
    if how == "nd":
        return Role("index", op, data=node.input[0], nd=_attr(node, "batch_dims", 0))
    if how == "class":                        # class ids: the input's dimension 1
        return Role("index", op, data=node.input[0], axis=1)
    if how == "batch":
        return Role("index", op, data=node.input[0], axis=0)
    if how == "seq":
        return Role("index", op, data=node.input[0], axis=_attr(node, "time_axis", 0), low=1,
                    extra=1)
    if how == "depth" and len(node.input) > 1:
        return Role("index", op, data=node.input[1], axis=-1)   # data = the depth tensor
    if how == "flat":
        return Role("index", op, data=node.input[0], axis=-2)   # any flat index of the input
    return None


def shapes_of(model) -> dict[str, tuple[int | str, ...]]:
    """Every tensor's shape that the model (after shape inference) states."""
    found = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.HasField(
                "shape"):
            found[value.name] = tuple(d.dim_value if d.HasField("dim_value") else
                                      (d.dim_param or "?") for d in value.type.tensor_type.shape.dim)
    for tensor in model.graph.initializer:
        found[tensor.name] = tuple(tensor.dims)
    return found


def constant_of(model, name: str) -> np.ndarray | None:
    """The value of an initializer or Constant node output, or None."""
    from onnx import numpy_helper
    for tensor in model.graph.initializer:
        if tensor.name == name:
            return numpy_helper.to_array(tensor)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
                if attr.name == "value_int":
                    return np.array(attr.i)
                if attr.name == "value_ints":
                    return np.array(list(attr.ints))
    return None


def refuse_shape_inputs(roles: dict[str, Role], names, where: str) -> None:
    """A one-line request for `samples:` when an input edgekit would have to make up sets a
    shape, a size or axes (with samples, their values are built in: onnx_expand)."""
    for name in names:
        role = roles.get(name)
        if role and role.kind in ("shape", "axes"):
            # axes too: IREE compiles them only as constants, taken from the samples
            what = "a shape or size" if role.kind == "shape" else "the axes"
            raise ModelLoadError(
                f"input {name!r} sets {what} of {role.op}: random values for it mean "
                "nothing", where=where,
                hint=f"give real values in `samples:` (a .npz with an array named {name!r} "
                     "beside the other inputs)")


def declared_output_shapes(model) -> list[tuple[int, ...] | None]:
    """Each graph output's shape where the model declares every dimension as a number, else
    None (IREE's importer compiles a declared shape into the module)."""
    shapes: list[tuple[int, ...] | None] = []
    for output in model.graph.output:
        tensor = output.type.tensor_type
        dims = tensor.shape.dim if tensor.HasField("shape") else None
        if dims is None or not all(d.HasField("dim_value") for d in dims):
            shapes.append(None)
        else:
            shapes.append(tuple(int(d.dim_value) for d in dims))
    return shapes


def refuse_contradicting_samples(model, made_up: tuple[str, ...], goldens, where: str) -> None:
    """Made-up inputs whose reference outputs have other shapes than the model declares (axes,
    crop sizes, data-dependent outputs such as NonZero's): the module is compiled for the
    declared shapes, so its golden outputs would judge it on inputs it does not take. A
    one-line request for `samples:`, naming the made-up integer inputs."""
    if not made_up:
        return
    names = [o.name for o in model.graph.output]
    declared_shapes = declared_output_shapes(model)
    for outputs in goldens:
        for name, declared, golden in zip(names, declared_shapes, outputs):
            got = tuple(np.shape(golden))
            if declared is not None and got != declared:
                raise ModelLoadError(
                    f"the values edgekit made up for input(s) {', '.join(map(repr, made_up))} "
                    f"give output {name!r} the shape {got} where the model declares "
                    f"{declared}: they are not inputs this model takes", where=where,
                    hint="give real values in `samples:` (a .npz with an array per input "
                         "name)")


def fit_to_roles(model, samples: dict[str, np.ndarray], roles: dict[str, Role],
                 rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`samples` (random arrays, by input name) with each index/axes/divisor input redrawn
    within what the graph allows, keeping its shape and dtype."""
    shapes = shapes_of(model)
    out = dict(samples)

    def dims_of(tensor: str) -> tuple[int | str, ...]:
        if tensor in out:
            return out[tensor].shape
        return shapes.get(tensor, ())

    for name, role in roles.items():
        if name not in out or role.kind == "shape":
            continue
        array = out[name]
        if role.kind == "zero_point":
            if array.dtype.kind not in "iu":    # float8 / float4 (ml_dtypes), not int8
                out[name] = np.zeros_like(array)
            continue
        if role.kind == "nonzero":
            if array.dtype.kind in "iu":
                out[name] = np.where(array == 0, np.ones_like(array), array)
            continue
        if array.dtype.kind not in "iu":
            continue
        if role.kind == "axes":
            rank = len(dims_of(role.data))
            count = array.size
            if rank and count <= rank:
                axes = rng.permutation(rank)[:count]
                out[name] = np.sort(axes).astype(array.dtype).reshape(array.shape)
            continue
        out[name] = _indices(model, role, array, dims_of(role.data), rng)
    return out


def _bound(size) -> int:
    return size if isinstance(size, (int, np.integer)) and size > 0 else 1


def _indices(model, role: Role, array: np.ndarray, data_dims, rng) -> np.ndarray:
    if role.axis == -1:                       # OneHot: the depth's value
        depth = constant_of(model, role.data)
        high = int(np.asarray(depth).reshape(-1)[0]) if depth is not None else 1
        return rng.integers(0, max(high, 1), size=array.shape).astype(array.dtype)
    if role.axis == -2:                       # a flat index into the whole input
        high = int(np.prod([_bound(d) for d in data_dims])) if data_dims else 1
        return rng.integers(0, high, size=array.shape).astype(array.dtype)
    if role.nd >= 0:                          # coordinates along the last axis
        if not array.shape:
            return array
        k = array.shape[-1]
        bounds = [_bound(data_dims[role.nd + j]) if role.nd + j < len(data_dims) else 1
                  for j in range(k)]
        count = int(np.prod(array.shape[:-1]))
        if role.op in _DISTINCT and count <= int(np.prod(bounds)):
            flat = rng.choice(int(np.prod(bounds)), size=count, replace=False)
            columns = list(np.unravel_index(flat, bounds))
            return np.stack(columns, axis=-1).astype(array.dtype).reshape(array.shape)
        columns = [rng.integers(0, b, size=array.shape[:-1]) for b in bounds]
        return np.stack(columns, axis=-1).astype(array.dtype).reshape(array.shape)
    axis = role.axis + len(data_dims) if role.axis < 0 else role.axis
    size = _bound(data_dims[axis]) if 0 <= axis < len(data_dims) else 1
    if role.op in _DISTINCT and array.ndim == len(data_dims) and array.shape \
            and array.shape[axis] <= size:    # a permutation per line along the axis
        keys = rng.random(array.shape[:axis] + (size,) + array.shape[axis + 1:])
        order = np.argsort(keys, axis=axis)
        return np.take(order, np.arange(array.shape[axis]), axis=axis).astype(array.dtype)
    return rng.integers(role.low, size + role.extra, size=array.shape).astype(array.dtype)
