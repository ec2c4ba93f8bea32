"""ONNX operators that IREE's ONNX input and torch-mlir cannot lower, replaced before the
import by the function body the ONNX spec defines for them at the model's opset (the body the
backend suite's `*_expanded` cases run): onnx's own schemas make the body (context-dependent
bodies from the node and its input types), onnx's own expansion helper splices it in. No body
of edgekit's own: an op without one in the spec stays as it is and the lowering names it."""

from __future__ import annotations

from collections import Counter

# Ops whose direct import or lowering fails (measured on onnx 1.23's node suite with
# torch-mlir/IREE as pinned): their spec bodies compile. Others with a body (Softmax, Gelu, …)
# lower directly, and better, as themselves.
KNOWN_TO_FAIL = frozenset({"Attention", "RMSNormalization", "RotaryEmbedding",
                           "LinearAttention", "FlexAttention", "AffineGrid",
                           "CausalConvWithState", "Swish", "SwiGLU", "NegativeLogLikelihoodLoss",
                           "SoftmaxCrossEntropyLoss"})
# Ops IREE lowers except in a mode torch-mlir's importer ignores (opset-28 SpaceToDepth's CRD
# order comes out in DCR order): expanded in that mode only
_WRONG_IN_MODE = {"SpaceToDepth": ("mode", b"CRD")}
# Domains whose ops may be expanded: the standard one and its preview (FlexAttention)
_DOMAINS = ("", "ai.onnx", "ai.onnx.preview")
_DEFAULT_DOMAINS = ("", "ai.onnx")
_MAX_ROUNDS = 4     # a body may hold another such op (none does in onnx 1.23): expand it too


def expand_functions(model, ops=KNOWN_TO_FAIL):
    """(model with every node of `ops` in the main graph replaced by its spec body, Counter of
    the ops expanded). Nodes whose schema has no body at the model's opset stay."""
    import onnx
    expanded: Counter = Counter()
    if not any(_wanted(n, ops) for n in model.graph.node):
        return model, expanded      # as given (its digest, hence the cache key, unchanged)
    for _ in range(_MAX_ROUNDS):
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
        opsets = {o.domain or "": o.version for o in model.opset_import}
        types = _known_types(model)
        nodes, changed = [], False
        for index, node in enumerate(model.graph.node):
            found = _body_of(node, opsets, types, ops)
            if found is None:
                nodes.append(node)
                continue
            with_defaults, body = found
            nodes.extend(_spliced(with_defaults, body, f"_ek_{node.op_type}_{index}_"))
            _add_opsets(model, body)
            expanded[node.op_type] += 1
            changed = True
        if not changed:
            break
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return model, expanded


def expansion_note(expanded: Counter) -> str:
    return ("expanded to their ONNX function bodies before the import (IREE cannot lower them "
            "as such): " + ", ".join(f"{op} ×{n}" for op, n in sorted(expanded.items())))


def _opset(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS),
               default=0)


def _schema(op: str, opset: int, domain: str = ""):
    import onnx
    try:
        return onnx.defs.get_schema(op, opset, domain)
    except onnx.defs.SchemaError:
        return None


def _has_body(schema) -> bool:
    return bool(schema.has_function or schema.has_context_dependent_function)


def _known_types(model) -> dict:
    import onnx
    types = {v.name: v.type for v in (*model.graph.input, *model.graph.value_info,
                                      *model.graph.output)}
    for tensor in model.graph.initializer:
        types.setdefault(tensor.name, onnx.helper.make_tensor_type_proto(
            tensor.data_type, list(tensor.dims)))
    return types


def _body_of(node, opsets: dict, types: dict, ops):
    """The node (with its schema's default attributes) and the FunctionProto of its op at the
    model's opset of its domain, or None (not asked for, no body, or a context-dependent body
    that needs an input type shape inference did not give)."""
    import onnx
    if not _wanted(node, ops):
        return None
    domain = "" if node.domain == "ai.onnx" else node.domain
    opset = opsets.get(domain, opsets.get("ai.onnx", 0) if not domain else 0)
    schema = _schema(node.op_type, opset, domain)
    if schema is None or not _has_body(schema):
        return None
    with_defaults = onnx.NodeProto()
    with_defaults.CopyFrom(node)
    given = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        if name not in given and attr.default_value and attr.default_value.name:
            with_defaults.attribute.append(attr.default_value)
    body = onnx.FunctionProto()
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= opset]
        if not versions:
            return None
        body.ParseFromString(schema.get_function_with_opset_version(max(versions)))
    else:
        versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
        if not versions or any(name and name not in types for name in node.input):
            return None
        input_types = [types[name] if name else onnx.TypeProto() for name in node.input]
        body.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            max(versions), with_defaults.SerializeToString(),
            [t.SerializeToString() for t in input_types]))
    return with_defaults, body


def _wanted(node, ops) -> bool:
    if node.domain not in _DOMAINS:
        return False
    if node.op_type in ops:
        return True
    name, value = _WRONG_IN_MODE.get(node.op_type, ("", b""))
    return bool(name) and any(a.name == name and a.s.upper() == value for a in node.attribute)


def _spliced(node, function, prefix: str) -> list:
    """The body's nodes with its formal inputs/outputs renamed to the node's, its inner names
    prefixed, attribute references resolved (onnx's own helper for the `*_expanded` cases)."""
    from onnx.backend.test.case.node import function_expand_helper
    return function_expand_helper(node, function, prefix)


def _add_opsets(model, body) -> None:
    """Opsets (domains) the body uses that the model does not import yet."""
    have = {o.domain for o in model.opset_import}
    for imported in body.opset_import:
        if imported.domain not in have and not (imported.domain in _DEFAULT_DOMAINS
                                                 and have & set(_DEFAULT_DOMAINS)):
            model.opset_import.append(imported)
            have.add(imported.domain)


# --- constant folding --------------------------------------------------------------------------

_NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "If", "Loop", "Scan"})
_FOLD_LIMIT = 1 << 16   # elements: shapes, axes and small tables, not weights


def fold_constants(model):
    """(model, number of nodes folded): nodes computable before the model runs (all inputs
    constant, or a Shape/Size of a tensor whose shape shape inference knows) replaced by their
    values, computed by onnx's reference evaluator, the spec's own semantics; an If whose
    condition is constant replaced by its branch. Spec bodies compute axes and shapes at run
    time (RMSNormalization's ReduceMean axes, AffineGrid's rank test); torch-mlir needs them
    constant."""
    total = 0
    for _ in range(_MAX_ROUNDS):
        model, folded = _fold_once(model)
        total += folded
        if not folded:
            break
    return model, total


# Inputs that set axes, shapes, sizes or counts: torch-mlir reads them with `aten.item` (which
# IREE cannot compile) unless they are constants. Graphs computing them (the spec's bodies
# written out, as the suite's `*_expanded` cases and some exporters do) are folded first.
_SHAPE_READS = {
    **{op: (1,) for op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare", "Squeeze", "Unsqueeze", "Reshape", "Expand",
                           "Tile", "CumSum", "TopK", "Split", "OneHot", "Upsample")},
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Range": (0, 1, 2), "ConstantOfShape": (0,),
    "Resize": (1, 2, 3), "Trilu": (1,), "CenterCropPad": (1, 2)}


def needs_folding(model) -> bool:
    """Whether the main graph computes an axes/shape input of a node from other nodes (not a
    Constant), or holds an If (a constant condition's branch is taken by `fold_constants`)."""
    made = {o for n in model.graph.node if n.op_type != "Constant" for o in n.output if o}
    for node in model.graph.node:
        if node.domain not in _DEFAULT_DOMAINS:
            continue
        if node.op_type == "If":
            return True
        reads = _SHAPE_READS.get(node.op_type, ())
        if any(i < len(node.input) and node.input[i] in made for i in reads):
            return True
    return False


def _fold_once(model):
    import onnx
    from onnx import numpy_helper
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    known = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes = {v.name: v.type.tensor_type for v in (*model.graph.input, *model.graph.value_info)
              if v.type.HasField("tensor_type")}
    opset = list(model.opset_import)
    kept, folded = [], 0
    for index, node in enumerate(model.graph.node):
        if node.op_type == "If" and node.domain in _DEFAULT_DOMAINS and node.input[0] in known:
            kept.extend(_taken_branch(node, bool(known[node.input[0]].reshape(-1)[0]),
                                      f"_ek_if{index}_", model.graph.initializer))
            folded += 1
            continue
        values = _fold(node, known, shapes, opset, model.ir_version)
        if values is None:
            kept.append(node)
            continue
        folded += 1
        for name, value in zip(node.output, values):
            if name:
                known[name] = value
                model.graph.initializer.append(numpy_helper.from_array(value, name))
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(kept)
        used = _read_names(kept) | {o.name for o in model.graph.output}
        unused = [t for t in model.graph.initializer if t.name not in used]
        for tensor in unused:
            model.graph.initializer.remove(tensor)
    return model, folded


def _taken_branch(node, condition: bool, prefix: str, initializers) -> list:
    """The nodes of an If's branch as nodes of the graph: names it defines prefixed (unique
    here), its outputs passed to the If's by Identity."""
    from onnx import helper
    branch = next(a.g for a in node.attribute
                  if a.name == ("then_branch" if condition else "else_branch"))
    defined = {o for n in branch.node for o in n.output if o} | {
        t.name for t in branch.initializer}
    renamed = {name: prefix + name for name in defined}
    for tensor in branch.initializer:
        copy = type(tensor)()
        copy.CopyFrom(tensor)
        copy.name = renamed[tensor.name]
        initializers.append(copy)
    nodes = []
    for inner in branch.node:
        copy = type(inner)()
        copy.CopyFrom(inner)
        for i, name in enumerate(copy.output):
            if name:
                copy.output[i] = renamed[name]
        _rename_reads([copy], renamed)
        nodes.append(copy)
    for value, out in zip(branch.output, node.output):
        if out:
            nodes.append(helper.make_node("Identity", [renamed.get(value.name, value.name)],
                                          [out]))
    return nodes


def _fold(node, known: dict, shapes: dict, opset, ir_version):
    import numpy as np
    if node.domain not in _DEFAULT_DOMAINS or node.op_type in _NOT_FOLDED:
        return None
    if any(a.type in (5, 10) for a in node.attribute):   # GRAPH, GRAPHS
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] not in known:
        dims = _static_dims(shapes.get(node.input[0]))
        if dims is None:
            return None
        if node.op_type == "Size":
            return (np.array(int(np.prod(dims)), dtype=np.int64),)
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(dims))
        return (np.array(dims, dtype=np.int64)[start:end],)
    if node.op_type == "CastLike" and node.input[0] in known and node.input[1] not in known:
        like = shapes.get(node.input[1])    # only the type of the second input counts
        if like is None or not like.elem_type:
            return None
        from onnx import helper
        return (known[node.input[0]].astype(helper.tensor_dtype_to_np_dtype(like.elem_type)),)
    if node.op_type != "Constant" and not all(not i or i in known for i in node.input):
        return None
    if sum(known[i].size for i in node.input if i) > _FOLD_LIMIT:
        return None
    try:
        values = _evaluate(node, known, opset, ir_version)
    except Exception:  # noqa: BLE001 -- the evaluator raises what numpy raises: left to run
        return None
    if any(not isinstance(v, np.ndarray) or v.size > _FOLD_LIMIT for v in values):
        return None
    return values


def _read_names(nodes) -> set[str]:
    """Every name the nodes read, their subgraphs' outer-scope reads included."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                names |= _read_names(graph.node)
    return names


def _static_dims(tensor_type):
    if tensor_type is None or not tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    return None if any(d is None for d in dims) else dims


def _evaluate(node, known: dict, opset, ir_version):
    import numpy as np
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    inputs = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(known[i].dtype),
                                            known[i].shape) for i in dict.fromkeys(node.input)
              if i]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    single = helper.make_model(graph, opset_imports=opset, ir_version=ir_version)
    got = ReferenceEvaluator(single).run(None, {i.name: known[i.name] for i in inputs})
    values = iter(np.asarray(v) for v in got)
    return tuple(next(values) if o else None for o in node.output)


# --- inputs built in as constants --------------------------------------------------------------

_STATIC_ROLES = ("shape", "axes")


def static_inputs(model, specs) -> set[str]:
    """The inputs whose sample value is built into the module: those that set a shape, a size
    or axes (torch-mlir reads them with `aten.item`, which IREE cannot compile), and those the
    recipe marks `static: true`."""
    from edgekit.pipeline.frontends.onnx_samples import input_roles
    roles = input_roles(model)
    return {n for n, r in roles.items() if r.kind in _STATIC_ROLES} | {
        s.name for s in specs if getattr(s, "static", False)}


def with_constant_inputs(model, values: dict):
    """The model with every read of the inputs in `values` reading a constant of that value
    instead (the inputs stay in the signature, unread: the bundle's inputs are the model's)."""
    import onnx
    from onnx import numpy_helper
    model = onnx.ModelProto.FromString(model.SerializeToString())
    renamed = {name: f"{name}__edgekit_static" for name in values}
    for name, value in values.items():
        model.graph.initializer.append(numpy_helper.from_array(value, renamed[name]))
    _rename_reads(model.graph.node, renamed)
    return model


def folded_note(values: dict) -> str:
    def shown(value) -> str:
        text = str(value.tolist())
        return text if len(text) <= 40 else text[:39] + "…"
    return ("inputs built into the module as constants, their values in `samples:` (the "
            "module ignores what is passed for them; build again for other values): "
            + ", ".join(f"{n!r} = {shown(v)}" for n, v in values.items()))


def _rename_reads(nodes, renamed: dict) -> None:
    for node in nodes:
        for i, name in enumerate(node.input):
            if name in renamed:
                node.input[i] = renamed[name]
        for attr in node.attribute:
            for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                shadowed = {v.name for v in graph.input}
                _rename_reads(graph.node, {k: v for k, v in renamed.items()
                                           if k not in shadowed})


def with_run_shapes(model, feeds: dict):
    """The model with a static type for every tensor whose rank shape inference leaves unknown
    (a Squeeze without axes in a spec body: AffineGrid's), read from a run of the onnx reference
    evaluator on `feeds`. Only for models whose inputs all have static shapes (a run's shapes
    are then the model's); unchanged when every rank is known or the run fails."""
    import onnx
    from onnx import helper
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    if any(_static_dims(v.type.tensor_type) is None for v in model.graph.input
           if v.type.HasField("tensor_type")):
        return model
    typed = {v.name for v in (*model.graph.value_info, *model.graph.input,
                              *model.graph.output)
             if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}
    typed |= {t.name for t in model.graph.initializer}
    unknown = [o for n in model.graph.node for o in n.output if o and o not in typed]
    if not unknown:
        return model
    try:
        from onnx.reference import ReferenceEvaluator
        values = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
    except Exception:  # noqa: BLE001 -- the evaluator raises what numpy raises: left as is
        return model
    known = {v.name for v in model.graph.value_info}
    for name in unknown:
        value = values.get(name)
        if value is None or not hasattr(value, "dtype") or value.dtype == object:
            continue
        if name in known:
            model.graph.value_info.remove(next(v for v in model.graph.value_info
                                               if v.name == name))
        model.graph.value_info.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


# --- Scan unrolled -----------------------------------------------------------------------------

_UNROLL_LIMIT = 4096    # body nodes × iterations: past this a Scan stays (and the lowering says)


def unroll_scans(model):
    """(model, Counter of iterations per Scan unrolled): every Scan (opset ≥ 9) of the main graph
    whose scanned length shape inference knows replaced by its body, once per iteration —
    torch-mlir and IREE lower no Scan, and LinearAttention's spec body is one. Iteration t reads
    slice t of each scanned input (Gather along its axis, from the end where its direction is
    reversed), its state outputs feed the next; the scan outputs are stacked along their axes.
    A Scan with subgraphs in its body, an unknown length or past `_UNROLL_LIMIT` stays."""
    import onnx
    if not any(n.op_type == "Scan" and n.domain in _DEFAULT_DOMAINS for n in model.graph.node):
        return model, Counter()
    if _opset(model) < 9:       # Scan-8 has a batch axis and sequence lengths: not this
        return model, Counter()
    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    dims = {v.name: _static_dims(v.type.tensor_type)
            for v in (*model.graph.input, *model.graph.value_info, *model.graph.output)
            if v.type.HasField("tensor_type")}
    dims.update({t.name: list(t.dims) for t in model.graph.initializer})
    unrolled: Counter = Counter()
    nodes = []
    for index, node in enumerate(model.graph.node):
        spliced = None
        if node.op_type == "Scan" and node.domain in _DEFAULT_DOMAINS:
            spliced = _unrolled(node, dims, f"_ek_scan{index}_", model.graph.initializer,
                                _opset(model))
        if spliced is None:
            nodes.append(node)
            continue
        nodes.extend(spliced[0])
        unrolled[spliced[1]] += 1
    if not unrolled:
        return model, unrolled
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return onnx.shape_inference.infer_shapes(model, data_prop=True), unrolled


def unrolled_note(unrolled: Counter) -> str:
    shown = ", ".join(f"×{n} of {t} iteration(s)" for t, n in sorted(unrolled.items()))
    return f"Scan unrolled (IREE lowers no Scan; the length is static here): {shown}"


def _unrolled(node, dims: dict, prefix: str, initializers, opset: int):
    """(nodes computing the Scan `node` without a Scan, its length), or None."""
    from onnx import helper, numpy_helper
    import numpy as np
    attrs = {a.name: a for a in node.attribute}
    body = attrs["body"].g
    scans = attrs["num_scan_inputs"].i
    states = len(node.input) - scans
    if any(a.type in (5, 10) for n in body.node for a in n.attribute):
        return None
    in_axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else [0] * scans
    in_dirs = (list(attrs["scan_input_directions"].ints) if "scan_input_directions" in attrs
               else [0] * scans)
    outs = len(body.output) - states
    out_axes = list(attrs["scan_output_axes"].ints) if "scan_output_axes" in attrs else [0] * outs
    out_dirs = (list(attrs["scan_output_directions"].ints) if "scan_output_directions" in attrs
                else [0] * outs)
    lengths, axes = set(), []
    for name, axis in zip(node.input[states:], in_axes):
        shape = dims.get(name)
        if shape is None:
            return None
        axis = axis + len(shape) if axis < 0 else axis
        axes.append(axis)
        lengths.add(shape[axis])
    if len(lengths) != 1:
        return None
    steps = lengths.pop()
    if steps < 1 or steps * max(len(body.node), 1) > _UNROLL_LIMIT:
        return None
    ranks = [len(_static_dims(o.type.tensor_type) or ()) if o.type.tensor_type.HasField("shape")
             else None for o in body.output[states:]]
    for k, axis in enumerate(out_axes):
        if axis < 0:
            if ranks[k] is None:
                return None
            out_axes[k] = axis + ranks[k] + 1
    made = []
    state = list(node.input[:states])
    per_step: list[list[str]] = [[] for _ in range(outs)]
    for t in range(steps):
        step = f"{prefix}t{t}_"
        env = {b.name: s for b, s in zip(body.input[:states], state)}
        for j, (b, outer) in enumerate(zip(body.input[states:], node.input[states:])):
            at = t if not in_dirs[j] else steps - 1 - t
            index_name = f"{step}at{j}"
            initializers.append(numpy_helper.from_array(np.array(at, dtype=np.int64),
                                                        index_name))
            made.append(helper.make_node("Gather", [outer, index_name], [step + b.name],
                                         axis=axes[j]))
            env[b.name] = step + b.name
        for tensor in body.initializer:
            copy = type(tensor)()
            copy.CopyFrom(tensor)
            copy.name = step + tensor.name
            initializers.append(copy)
            env[tensor.name] = copy.name
        for inner in body.node:
            copy = type(inner)()
            copy.CopyFrom(inner)
            copy.name = step + inner.name if inner.name else ""
            for i, name in enumerate(copy.input):
                copy.input[i] = env.get(name, name)
            for i, name in enumerate(copy.output):
                if name:
                    env[name] = copy.output[i] = step + name
            made.append(copy)
        state = [env.get(o.name, o.name) for o in body.output[:states]]
        for k, o in enumerate(body.output[states:]):
            per_step[k].append(env.get(o.name, o.name))
    for outer, final in zip(node.output[:states], state):
        if outer:
            made.append(helper.make_node("Identity", [final], [outer]))
    for k, outer in enumerate(node.output[states:]):
        if not outer:
            continue
        order = per_step[k] if not out_dirs[k] else per_step[k][::-1]
        stacked = []
        for t, name in enumerate(order):
            lifted = f"{prefix}out{k}_{t}"
            if opset >= 13:
                axes_name = f"{prefix}out{k}_axes"
                if t == 0:
                    initializers.append(numpy_helper.from_array(
                        np.array([out_axes[k]], dtype=np.int64), axes_name))
                made.append(helper.make_node("Unsqueeze", [name, axes_name], [lifted]))
            else:
                made.append(helper.make_node("Unsqueeze", [name], [lifted], axes=[out_axes[k]]))
            stacked.append(lifted)
        made.append(helper.make_node("Concat", stacked, [outer], axis=out_axes[k]))
    return made, steps
