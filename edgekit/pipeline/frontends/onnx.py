"""The ONNX frontend: an .onnx file (onnx_source.py: safe loading, opset upgrade, input
signature; onnx_samples.py: random samples that fit the graph) with golden outputs from
onnxruntime, unoptimized, or the onnx reference evaluator; QDQ/QOperator recognition instead of
quantizing (quantize/onnx_qdq.py); one graph rewrite, a QDQ model's int8 convolutions as
integer matmuls (onnx_int8.py); torch-mlir's ONNX importer, whose ONNX form
is what the `torch` lowering hands IREE's own ONNX input (tried first; tosa first for a float
model with convolutions: _first_lowerings), each step in a child
process."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from edgekit.config.edgekit_flags import PREFIX, parse_edgekit_flags
from edgekit.config.profiles import Target
from edgekit.config.recipe import InputSpec, ModelSource, Recipe
from edgekit.errors import ConfigError, ModelLoadError, QuantizationError
from edgekit.pipeline.export import ExportedModel, declared_shape, with_signature
from edgekit.pipeline.frontends.base import CheckScope, Frontend, OpModule
from edgekit.pipeline.frontends.onnx_expand import (expand_functions, expansion_note,
                                                    fold_constants, folded_note,
                                                    needs_folding,
                                                    static_inputs, unroll_scans,
                                                    unrolled_note, with_constant_inputs,
                                                    with_run_shapes)
from edgekit.pipeline.frontends.onnx_samples import (fit_to_roles, input_roles,
                                                     refuse_contradicting_samples,
                                                     refuse_shape_inputs)
from edgekit.pipeline.frontends.onnx_source import (Reference, check_outputs, load_onnx,
                                                    onnx_digest, onnx_inputs)
from edgekit.pipeline.load import (DRAWN_NONE, DRAWN_PREFIX, SAMPLE_SETS, LoadedModel,
                                   coverage_notes, drawn_note, more_samples_for, random_input,
                                   sample_inputs)
from edgekit.pipeline.lower import ImportedGraph, LoweringSource
from edgekit.toolchain import torch_mlir

if TYPE_CHECKING:
    import onnx     # imported where it is used: PyTorch builds never load it

Model: TypeAlias = "onnx.ModelProto"

# The torch lowering hands IREE the ONNX import itself: IREE's ONNX input keeps QDQ models'
# contractions integer, where torch-mlir's own ONNX-to-torch pipeline leaves them f32 (measured,
# 0 of 5 integer). The tosa and linalg lowerings start from that pipeline's torch-backend form.
ONNX_INPUT = "onnx"
# IREE computes float64 in float32 unless told otherwise (its entry points then take and return
# f32: fed a float64 .npy, the module reads its bytes as f32 and answers garbage).
F64_KEPT = "--iree-input-demote-f64-to-f32=false"


def refuse_other_shapes(recipe: Recipe, graph_inputs) -> None:
    """A ConfigError naming the shape the model declares for an input whose recipe shape
    contradicts it (another rank, or another fixed size; a named size takes any)."""
    declared = {name: shape for name, shape, _ in graph_inputs}
    for index, spec in enumerate(recipe.inputs):
        expected = declared[spec.name]
        if len(expected) == len(spec.shape) and all(
                not isinstance(e, int) or not isinstance(g, int) or e == g
                for e, g in zip(expected, spec.shape)):
            continue
        shown = "[" + ", ".join(str(d) for d in expected) + "]"
        raise ConfigError(f"input {spec.name!r} has shape {list(spec.shape)} here, but the "
                          f"model expects {shown}", where=str(recipe.path),
                          key=f"inputs[{index}].shape",
                          hint=f"give sizes that fit {shown} (a named size takes any)"
                               if any(isinstance(d, str) for d in expected) else
                               f"set it to {shown}, or leave `inputs:` out: the ONNX model "
                               "declares its own")


def _f32(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if array.dtype == np.float64 else array


class OnnxFrontend(Frontend[Model]):
    kind = "onnx"
    sources = ("onnx",)
    importer = "ONNX"

    def load(self, recipe: Recipe) -> LoadedModel:
        path = recipe.resolve(recipe.model.onnx or "")
        where = str(path)
        notes: list[str] = []
        model = load_onnx(path, notes)
        graph_inputs = onnx_inputs(model, where)
        check_outputs(model, where)
        names = tuple(n for n, _, _ in graph_inputs)
        if recipe.inputs:
            declared = tuple(s.name for s in recipe.inputs)
            missing = sorted(set(declared) - set(names))
            if missing:
                raise ModelLoadError(f"the model has no input(s) {missing}", where=where,
                                     hint="its inputs: " + ", ".join(repr(n) for n in names))
            refuse_other_shapes(recipe, graph_inputs)
            specs, names = recipe.inputs, declared
        else:
            specs = tuple(InputSpec(name=n, shape=shape, dtype=dtype)
                          for n, shape, dtype in graph_inputs)
        if recipe.samples:
            samples = sample_inputs(recipe, None, specs)
            static = static_inputs(model, specs)
            roles = input_roles(model)
            kept = static | {n for n, r in roles.items() if r.kind == "zero_point"}
            more = more_samples_for(recipe, samples,
                                    keep=tuple(i for i, n in enumerate(names) if n in kept))
            # drawn indices and divisors fit the graph as made-up ones do (integral, in range)
            fitted = {n: r for n, r in roles.items() if n not in kept}
            rng = np.random.default_rng([recipe.seed, 2])
            more = tuple(tuple(fit_to_roles(model, dict(zip(names, s)), fitted, rng)[n]
                               for n in names) for s in more)
            return LoadedModel(self, model, samples, names, more_samples=more,
                               notes=(*notes, drawn_note(len(more)),
                                      *coverage_notes(names, (samples, *more))))
        marked = [i for i, s in enumerate(recipe.inputs) if s.static]
        if marked:
            raise ConfigError(f"input {recipe.inputs[marked[0]].name!r} is marked `static: "
                              "true` but the recipe gives no `samples:` to take its value from",
                              where=str(recipe.path), key=f"inputs[{marked[0]}].static",
                              hint="give `samples:` (a .npz with an array per input name)")
        if not recipe.inputs:
            dynamic = {n: [d for d in shape if isinstance(d, str)] for n, shape, _ in graph_inputs}
            dynamic = {n: d for n, d in dynamic.items() if d}
            if dynamic:
                raise ModelLoadError(
                    "the model has dynamic input dimensions: " + "; ".join(
                        f"{n!r}: {', '.join(d)}" for n, d in dynamic.items()), where=where,
                    hint="declare `inputs:` with sizes (or named dims under `dynamic_dims`) in "
                         "the recipe, or give `samples:`")
        roles = input_roles(model)
        refuse_shape_inputs(roles, names, where)
        # a range the recipe sets for an input wins over what the graph suggests
        roles = {n: r for n, r in roles.items()
                 if not any(s.name == n and (s.low is not None or s.high is not None)
                            for s in specs)}
        rng = np.random.default_rng(recipe.seed)
        sets = []
        for _ in range(SAMPLE_SETS):
            drawn = {spec.name: random_input(spec, recipe, rng) for spec in specs}
            drawn = fit_to_roles(model, drawn, roles, rng)
            sets.append(tuple(drawn[n] for n in names))
        # random integers are what a model refuses (indices, sizes); random floats rarely
        suspects = tuple(n for n, a in zip(names, sets[0]) if a.dtype.kind in "iub") or names
        return LoadedModel(self, model, sets[0], names, notes=tuple(notes),
                           random_inputs=suspects, more_samples=tuple(sets[1:]))

    def export(self, recipe: Recipe, loaded: LoadedModel) -> ExportedModel[Model]:
        """ONNX needs no export: its golden outputs come from onnxruntime, unoptimized (or the
        onnx reference evaluator where onnxruntime cannot run the model)."""
        keep_f64 = F64_KEPT in recipe.compile.flags

        def as_module_sees(sample):  # float64 rounded to float32, as the module computes it
            return tuple(s if keep_f64 or s.dtype != np.float64 else
                         s.astype(np.float32).astype(np.float64) for s in sample)
        ref = Reference(loaded.model, loaded.input_names, loaded.random_inputs)
        sets = [as_module_sees(s) for s in (loaded.samples, *loaded.more_samples)]
        notes = loaded.notes
        if recipe.samples:     # the sets after the user's were drawn: they must fit the model
            goldens, sets, notes = _with_drawn_that_fit(ref, sets, notes)
        else:
            goldens = [ref(s) for s in sets]
        refuse_contradicting_samples(loaded.model, loaded.random_inputs, goldens,
                                     str(recipe.resolve(recipe.model.onnx or "")))
        if not keep_f64 and any(a.dtype == np.float64 for a in (*sets[0], *goldens[0])):
            sets = [tuple(_f32(a) for a in s) for s in sets]
            goldens = [tuple(_f32(a) for a in g) for g in goldens]
            notes = (*notes, "float64 inputs and outputs are computed in float32 (IREE "
                             f"demotes f64 by default; `{F64_KEPT}` in `compile.flags` keeps "
                             "them)")
        # goldens come from the model as given; IREE gets the spec's bodies of what it cannot
        # lower (the same model by the spec's definition)
        graph, expanded = expand_functions(loaded.model)
        static = static_inputs(loaded.model, recipe.inputs or ()) if recipe.samples else set()
        values = {n: a for n, a in zip(loaded.input_names, loaded.samples) if n in static}
        if values:
            graph = with_constant_inputs(graph, values)
            notes = (*notes, folded_note(values))
        folded = bool(expanded or values or needs_folding(graph))
        if folded:
            graph, _ = fold_constants(graph)    # run-time axes and shapes made constants
        graph, unrolled = unroll_scans(graph)   # (a LinearAttention body is one)
        if unrolled:
            graph, _ = fold_constants(graph)
            notes = (*notes, unrolled_note(unrolled))
        if folded or unrolled:
            graph = with_run_shapes(graph, dict(zip(loaded.input_names, sets[0])))
        if expanded:
            notes = (*notes, expansion_note(expanded))
        shapes = [declared_shape(recipe, i, s) for i, s in enumerate(sets[0])]
        exported = with_signature(self, graph, onnx_digest(graph),
                                  loaded.input_names, shapes, sets[0], goldens[0],
                                  reference=ref.name, notes=notes)
        return dataclasses.replace(exported, more_samples=tuple(sets[1:]),
                                   more_golden=tuple(goldens[1:]), folded=tuple(values.items()))

    def with_quantize_mode(self, recipe: Recipe, mode: str) -> Recipe:
        """ONNX models arrive quantized: "int8" is the (QDQ) model as it is, "none" the fp32
        model the recipe names in `quantize.float_model`."""
        float_model = recipe.quantize.float_model if recipe.quantize else None
        if mode == "int8":
            return recipe
        if mode == "none" and float_model:
            return recipe.model_copy(update={"model": ModelSource(onnx=float_model),
                                             "quantize": None})
        raise ConfigError(f"no {mode} variant of an ONNX model: "
                          + ("the recipe names no fp32 model" if mode == "none" else
                             "ONNX models are quantized with onnxruntime before the build"),
                          where=str(recipe.path), key="quantize",
                          hint="set `quantize.float_model` to the fp32 .onnx" if mode == "none"
                          else "make a QDQ model with onnxruntime's quantize_static")

    def quantize(self, recipe: Recipe, exported: ExportedModel[Model]) -> ExportedModel[Model]:
        from edgekit.pipeline.quantize.onnx_qdq import quantized_onnx
        return quantized_onnx(recipe, exported)

    def rewrite(self, exported: ExportedModel[Model], flags: tuple[str, ...]
                ) -> ExportedModel[Model]:
        """`--edgekit-int8-convs-as-matmul` on a QDQ model: its int8 convolutions as int8
        im2col + integer MatMul (onnx_int8.py); other `--edgekit-…` flags are not applied."""
        asked = parse_edgekit_flags(flags)  # the recipe and profile were checked on loading
        if not asked:
            return exported
        program, notes, compile_flags = exported.program, [], ()
        as_matmul = asked.pop("int8-convs-as-matmul", None)
        quantized = exported.quantization is not None and exported.quantization.mode == "int8"
        if as_matmul is not None and quantized:
            from edgekit.pipeline.frontends.onnx_int8 import (int8_convs_as_matmul,
                                                              lowering_note)
            from edgekit.pipeline.rewrite import INNER_TILED
            flag = f"{PREFIX}int8-convs-as-matmul={as_matmul}"
            rewritten = total = 0
            if as_matmul == "u8":   # only if every contraction takes it (onnx_int8.u8_form)
                program, rewritten, total = int8_convs_as_matmul(program, unsigned=True)
                if rewritten:
                    compile_flags = () if INNER_TILED in flags else (INNER_TILED,)
                    notes.append(lowering_note(rewritten, total, flag, unsigned=True)
                                 + "".join(f"; {INNER_TILED} added" for _ in compile_flags))
            if not rewritten:
                program, rewritten, total = int8_convs_as_matmul(program)
                if total:
                    notes.append(lowering_note(rewritten, total, flag))
        elif as_matmul is not None:
            asked["int8-convs-as-matmul"] = as_matmul
        if asked:
            notes.append("ONNX models are lowered as they come: "
                         + ", ".join(f"{PREFIX}{name}" for name in asked) + " not applied")
        if not notes:
            return exported
        return dataclasses.replace(exported, program=program,
                                   rewrites=(*exported.rewrites, *notes),
                                   compile_flags=(*exported.compile_flags, *compile_flags))

    def dataset_reference(self, recipe: Recipe, exported: ExportedModel[Model], fp32: bool):
        """onnxruntime (or the reference evaluator) on the graph as built; for `fp32` and a
        quantized model, on `quantize.float_model` if the recipe names one, else on the model
        with its Q/DQ pairs removed (onnx_float.py; a QOperator model is refused)."""
        from edgekit.pipeline.frontends.onnx_float import is_quantized, without_qdq
        graph = exported.program
        if fp32 and is_quantized(graph):
            float_model = recipe.quantize.float_model if recipe.quantize else None
            graph = load_onnx(recipe.resolve(float_model)) if float_model else \
                without_qdq(graph, str(recipe.path))
        initializers = {i.name for i in graph.graph.initializer}
        names = tuple(i.name for i in graph.graph.input if i.name not in initializers)
        missing = sorted(set(names) - {s.name for s in exported.inputs})
        if missing:
            raise ConfigError(f"validation.dataset: the reference model takes inputs the "
                              f"build's does not: {missing}", where=str(recipe.path),
                              key="quantize.float_model")
        reference = Reference(graph, names)

        def run(samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
            given = dict(zip((s.name for s in exported.inputs), samples))
            return reference(tuple(given[n] for n in names))
        return run

    def interchange(self, graph: Model, opset: int) -> bytes:
        return graph.SerializeToString()    # as loaded (an NPU compiler says if it is too new)

    def import_graph(self, graph: Model) -> ImportedGraph:
        """The ONNX import (a child process) is the `torch` lowering, tried first: IREE's own
        ONNX input is IREE's supported path for ONNX. torch-mlir's ONNX→torch conversion
        (another child) is made only if tosa or linalg are tried, so its failures and crashes
        are failed attempts of those lowerings, never of `torch`."""
        from edgekit.pipeline.frontends.onnx_int8 import with_byte_gathers
        onnx_form = torch_mlir.import_onnx_form(graph)
        plain = with_byte_gathers(graph)    # the int8 conv rewrite's word gathers: IREE only
        return ImportedGraph(
            provided={"torch": LoweringSource(onnx_form, ONNX_INPUT)},
            convert=lambda: torch_mlir.onnx_to_torch_backend(
                onnx_form if plain is graph else torch_mlir.import_onnx_form(plain)),
            convert_command="torch-mlir-opt -pass-pipeline='builtin.module(torch-onnx-to-"
                            "torch-backend-pipeline)' input.mlirbc",
            first=_first_lowerings(graph),
            first_note=_first_note(graph))

    def graph_to_check(self, recipe: Recipe) -> tuple[Model, str]:
        """The graph as the build imports it: ops IREE cannot lower expanded (as `export`)."""
        model, expanded = expand_functions(load_onnx(recipe.resolve(recipe.model.onnx or "")))
        if expanded or needs_folding(model):
            model, _ = fold_constants(model)
        model, unrolled = unroll_scans(model)
        if unrolled:
            model, _ = fold_constants(model)
        return model, onnx_digest(model)

    def op_modules(self, graph: Model) -> list[OpModule]:
        """The graph's node types (with their domain)."""
        first: dict[str, object] = {}
        counts: Counter = Counter()
        for node in graph.graph.node:
            key = f"{node.domain + '.' if node.domain else ''}{node.op_type}"
            counts[key] += 1
            first.setdefault(key, node)
        return [OpModule(op, counts[op], lambda n=node: torch_mlir.import_onnx(
            _single_node_model(graph, n))) for op, node in first.items()]

    def check_scope(self, graph: Model, target: Target, where: str) -> CheckScope:
        """The lowerings a build tries, in its order: IREE's ONNX input first."""
        from edgekit.pipeline.quantize.onnx_qdq import qdq_summary
        try:
            qdq = qdq_summary(graph, where)
        except QuantizationError as refused:  # contrib QDQ ops: the build refuses them
            return CheckScope((), f"{refused.what}; {refused.hint}")
        if qdq is None or qdq.quantized == 0:
            return CheckScope(("torch", *(lw for lw in target.lowering if lw != "torch")))
        # int8 builds take the torch lowering only (IREE's ONNX input keeps them integer)
        return CheckScope(("torch",), (
            f"{qdq.format} int8 model: {qdq.quantized} of {qdq.contractions} contractions are "
            "quantized; `lowering: auto` takes torch (IREE's ONNX input), the lowering that "
            "keeps them integer"))


def _with_drawn_that_fit(ref, sets, notes):
    """(goldens, sets, notes): the user's set and the drawn ones the reference runs with
    outputs shaped as the user's (a drawn set that fails, or gives other shapes, is not one the
    model is built for: the drawn sets are then left out, and the note says so)."""
    first = ref(sets[0])
    notes = tuple(n for n in notes if not n.startswith(DRAWN_PREFIX))
    try:
        more = [ref(s) for s in sets[1:]]
    except ModelLoadError as failed:
        return [first], sets[:1], (*notes, f"{DRAWN_NONE} (the reference fails on drawn "
                                           f"values: {failed.what})")
    if any(tuple(a.shape for a in g) != tuple(a.shape for a in first) for g in more):
        return [first], sets[:1], (*notes, f"{DRAWN_NONE} (drawn values change the outputs' "
                                           "shapes)")
    return [first, *more], sets, (*notes, drawn_note(len(more)))


# A float model with convolutions takes tosa first (then IREE's ONNX input): tosa's
# convolutions are NHWC, IREE's ONNX input keeps ONNX's NCHW ones, and IREE 3.13 runs those
# ~3× slower. Small CNN fp32, host, 1 thread, same run (bench/onnx_qdq.py): IREE's ONNX input
# 0.259 ms, linalg (NCHW too) 0.262, tosa 0.089 — the PyTorch build of the same model (tosa)
# 0.093. A quantized model keeps IREE's ONNX input first (its contractions stay integer there).
TOSA_FIRST_OPS = frozenset({"Conv"})


def _first_lowerings(graph) -> tuple[str, ...]:
    if _float64_signature(graph):
        return ()
    if _float_convolutions(graph):
        return ("tosa", "torch")
    return ("torch",)


def _first_note(graph) -> str:
    if _first_lowerings(graph) == ("tosa", "torch"):
        return ("float ONNX model with convolutions: tosa (NHWC convolutions) tried first, "
                "then IREE's own ONNX input")
    return "ONNX model: IREE's own ONNX input tried first"


def _float_convolutions(graph) -> bool:
    """A model with a convolution and no quantization (QDQ or QOperator)."""
    from edgekit.pipeline.frontends.onnx_float import is_quantized
    return (any(n.op_type in TOSA_FIRST_OPS for n in graph.graph.node)
            and not is_quantized(graph))


def _float64_signature(model) -> bool:
    """IREE's ONNX input keeps float64 at the module's entry (expected f64: measured), where
    the torch-mlir lowerings' modules take the float32 this frontend feeds them (F64_KEPT):
    such models keep the profile's order."""
    double = 11   # onnx.TensorProto.DOUBLE
    return any(v.type.tensor_type.elem_type == double
               for v in (*model.graph.input, *model.graph.output))


def _single_node_model(model, node):
    """A model of one node: its tensor inputs become graph inputs typed from shape inference,
    initializers it reads stay initializers (constant operands such as shapes and axes)."""
    import onnx
    from onnx import helper
    known = {v.name: v for v in [*model.graph.input, *model.graph.value_info,
                                 *model.graph.output]}
    initializers = {t.name: t for t in model.graph.initializer}
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == "Constant"}
    inputs, inits, nodes = [], [], []
    for name in node.input:
        if not name:
            continue
        if name in initializers:
            inits.append(initializers[name])
        elif name in constants:
            nodes.append(constants[name])
        elif name in known:
            inputs.append(known[name])
        else:
            raise ValueError(f"no shape known for {name!r}")
    outputs = [known[o] if o in known else helper.make_empty_tensor_value_info(o)
               for o in node.output if o]
    graph = helper.make_graph([*nodes, node], f"single_{node.op_type}", inputs, outputs,
                              initializer=inits)
    single = helper.make_model(graph, opset_imports=list(model.opset_import),
                               ir_version=model.ir_version)
    return onnx.shape_inference.infer_shapes(single)
