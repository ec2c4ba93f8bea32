"""The PyTorch frontend: a python factory or a .pt2 file → torch.export (functionalized: in-place
ops and buffers become pure) with golden outputs from eager PyTorch; PT2E quantization; graph
rewrites; torch-mlir's FX importer."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import io
import logging
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils import _pytree as pytree

from edgekit.config.profiles import Target
from edgekit.config.recipe import Quantize, Recipe
from edgekit.errors import ConfigError, ModelLoadError
from edgekit.pipeline.export import ExportedModel, declared_shape, with_signature
from edgekit.pipeline.frontends.base import CheckScope, Frontend, OpModule
from edgekit.pipeline.frontends.torch_hf import DecoderPair, with_cache_choice, with_decode
from edgekit.pipeline.load import (LoadedModel, coverage_notes, drawn_note, import_callable,
                                   more_samples_for, sample_inputs)
from edgekit.pipeline.lower import ImportedGraph
from edgekit.pipeline.rewrite import rewrite_graph
from edgekit.toolchain import torch_mlir

Program = torch.export.ExportedProgram


class TorchFrontend(Frontend[Program]):
    kind = "pytorch"
    sources = ("python", "exported")
    importer = "FX"

    def load(self, recipe: Recipe) -> LoadedModel:
        source = recipe.model
        if source.exported:
            path = recipe.resolve(source.exported)
            if not source.trust_pickle:
                raise ConfigError(
                    f"refusing to load {path.name}: torch.export.load unpickles it, which can "
                    "run any code the file holds", where=str(path),
                    hint="if you made this file or trust its source, add `trust_pickle: true` "
                         "under `model:` or pass --trust-pickle")
            model, examples = _load_exported(path), None
        else:
            model, examples = _call_factory(recipe, source.python or "")
        model, chosen = with_cache_choice(recipe, model)
        samples = sample_inputs(recipe, examples)
        names = tuple(s.name for s in recipe.inputs) or _argument_names(model, len(samples))
        described = tuple(f"{list(a.shape)} {a.dtype}" for a in examples or ())
        more = more_samples_for(recipe, samples)
        notes = (*chosen, *((drawn_note(len(more)),) if recipe.samples else ()))
        return LoadedModel(frontend=self, model=model, samples=samples, input_names=names,
                           more_samples=more, example_inputs=described,
                           notes=(*notes, *coverage_notes(names, (samples, *more))))

    def export(self, recipe: Recipe, loaded: LoadedModel) -> ExportedModel[Program]:
        args = tuple(torch.from_numpy(np.array(s)) for s in loaded.samples)
        if isinstance(loaded.model, Program):  # a .pt2: exported already
            program = loaded.model
            run = program.module()
        else:
            try:
                with _torch_quiet() as said:
                    program = torch.export.export(loaded.model, args,
                                                  dynamic_shapes=dynamic_shapes(recipe))
            except Exception as exc:  # torch.export raises many kinds; all mean "cannot export"
                # a model that fails eagerly on the recipe's inputs is a wrong input, not an
                # untraceable model: say so rather than blame torch.export
                mismatch = _input_mismatch(recipe, loaded.model, args, loaded.example_inputs)
                raise (mismatch or export_failure(exc)) from None
            sys.stderr.write(said.getvalue())  # a successful export's warnings still show
            run = loaded.model
        shapes = [declared_shape(recipe, i, s) for i, s in enumerate(loaded.samples)]
        exported = self.exported(program, run, tuple(loaded.samples), loaded.input_names,
                                 shapes, loaded.more_samples)
        exported = dataclasses.replace(exported, notes=(*exported.notes, *loaded.notes))
        if recipe.validation.reference == "float64":
            exported = float64_golden(exported, run, loaded.model, str(recipe.path))
        if isinstance(loaded.model, DecoderPair):   # `cache: static`: the decode function too
            exported = with_decode(exported, loaded.model, str(recipe.path))
        return exported

    def exported(self, program: Program, run, samples: tuple[np.ndarray, ...],
                 names: tuple[str, ...], shapes: list,
                 more_samples: tuple[tuple[np.ndarray, ...], ...] = ()
                 ) -> ExportedModel[Program]:
        """An ExportedModel whose golden outputs come from running `run` (the original model,
        eager) on the samples."""
        exported = with_signature(self, program, program_digest(program), names, shapes,
                                  samples, eager_outputs(run, samples),
                                  reference=f"PyTorch {torch.__version__} (eager)")
        return dataclasses.replace(exported, more_samples=more_samples, more_golden=tuple(
            eager_outputs(run, s) for s in more_samples))

    def reference_outputs(self, exported: ExportedModel[Program],
                          samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return eager_outputs(exported.program.module(), samples)

    def dataset_reference(self, recipe: Recipe, exported: ExportedModel[Program], fp32: bool
                          ) -> Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]]:
        module = exported.program.module()   # once: unlifting costs more than a sample's run
        return lambda samples: eager_outputs(module, samples)

    def with_quantize_mode(self, recipe: Recipe, mode: str) -> Recipe:
        # the layers kept float (and the search choosing them) are an int8 build's
        mixed = {"max_drop", "keep_float", "search"} if mode != "int8" else set()
        settings = recipe.quantize.model_dump(exclude={"mode", "weights", *mixed}) \
            if recipe.quantize else {}
        quantize = None if mode == "none" else Quantize.model_validate({**settings, "mode": mode})
        return recipe.model_copy(update={"quantize": quantize})

    def quantize(self, recipe: Recipe, exported: ExportedModel[Program]
                 ) -> ExportedModel[Program]:
        from edgekit.pipeline.quantize.pt2e import quantized_program  # torchao: load on use
        return quantized_program(recipe, exported)

    def rewrite(self, exported: ExportedModel[Program], flags: tuple[str, ...]
                ) -> ExportedModel[Program]:
        return rewrite_graph(exported, flags)

    def interchange(self, graph: Program, opset: int) -> bytes:
        """torch.onnx's dynamo exporter (onnxscript), its progress chatter held back."""
        quiet = logging.getLogger("torch.onnx")   # "torchvision is not installed" × 4
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            with contextlib.redirect_stdout(io.StringIO()):   # it prints its progress
                exported = torch.onnx.export(graph, (), dynamo=True, opset_version=opset,
                                             optimize=True, verbose=False)
        except Exception as exc:  # torch.onnx raises many kinds; all mean "no ONNX of it"
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise ModelLoadError(f"exporting the model to ONNX failed: {first[:200]}",
                                 where="stage npu",
                                 hint="the NPU compiler reads ONNX: the model must pass "
                                      "torch.onnx.export(dynamo=True)") from None
        finally:
            quiet.setLevel(level)
        return exported.model_proto.SerializeToString()

    def __init__(self):
        # `check` lists the decomposed program's ops, then imports it: decomposing once saves
        # seconds on a large model (ResNet-50: ~5 s). One slot, emptied by the import.
        self._decomposed: tuple[Program, Program] | None = None

    def import_graph(self, graph: Program,
                     more: tuple[tuple[str, Program], ...] = ()) -> ImportedGraph:
        cached, self._decomposed = self._decomposed, None
        decomposed = cached[1] if cached is not None and cached[0] is graph else None
        return ImportedGraph(torch_mlir.import_program(graph, decomposed, more))

    def graph_to_check(self, recipe: Recipe) -> tuple[Program, str]:
        exported = self.export(recipe, self.load(recipe))
        return exported.program, exported.digest

    def op_modules(self, graph: Program) -> list[OpModule]:
        """The ATen ops of the graph as torch-mlir's import decomposes it."""
        decomposed = torch_mlir.decompose(graph)
        self._decomposed = (graph, decomposed)
        # ATen ops only: getitem and other structural nodes are no ops of their own
        nodes = [n for n in decomposed.graph.nodes if n.op == "call_function"
                 and isinstance(n.target, torch._ops.OpOverload)]
        counts = Counter(_op_name(n) for n in nodes)
        first: dict[str, torch.fx.Node] = {}
        for n in nodes:
            first.setdefault(_op_name(n), n)
        return [OpModule(op, counts[op], lambda n=node: _import_single_aten(n))
                for op, node in first.items()]

    def check_scope(self, graph: Program, target: Target, where: str) -> CheckScope:
        return CheckScope(tuple(target.lowering))


@contextlib.contextmanager
def _torch_quiet():
    """torch.export's failures print pages on stderr (the partial graph, symbolic-shape
    warnings) besides the exception: hold them, so a failure is the one line we make of it."""
    names = ["torch", *(n for n in logging.root.manager.loggerDict if n.startswith("torch."))]
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    for logger, _ in saved:   # fake_tensor logs its failures at ERROR, traceback included
        logger.setLevel(logging.CRITICAL)
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield held
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def _input_mismatch(recipe: Recipe, model, args: tuple,
                    examples: tuple[str, ...] = ()) -> ConfigError | None:
    """A ConfigError naming the recipe's inputs if the model fails on them eagerly too, and
    the inputs the model's factory gives as its example (the shapes it expects)."""
    try:
        with _torch_quiet(), torch.no_grad():
            model(*args)
    except Exception as exc:  # noqa: BLE001 — any eager failure means the same thing here
        text = str(exc).strip()
        first = text.splitlines()[0].strip() if text else type(exc).__name__
        given = ", ".join(f"{n} {list(a.shape)} {str(a.dtype).removeprefix('torch.')}"
                          for n, a in zip([s.name for s in recipe.inputs] or
                                          [f"input_{i}" for i in range(len(args))], args))
        expected = (f"its factory's example input{'s' if len(examples) > 1 else ''}: "
                    f"{', '.join(examples)}; ") if examples else ""
        return ConfigError(f"the model fails on the recipe's inputs ({given}): {first[:200]}",
                           where=str(recipe.path), key="inputs",
                           hint=f"{expected}set inputs[].shape and dtype to what the model's "
                                "forward expects")
    return None


_USER_FRAME = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", '
                         r'line (\d+), in \w+\n\s*(.+)')


def export_failure(exc: Exception) -> ModelLoadError:
    """torch.export's error in one line: its first sentence (a data-dependent guard's symbolic
    expression clipped) and the user's source line that raised it, not torch's page."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else type(exc).__name__
    if len(first) > 200:
        first = first[:199] + "…"
    frame = _USER_FRAME.search(text)
    where = f"{frame.group(1)}:{frame.group(2)}" if frame else "stage export"
    code = f" (`{frame.group(3).strip()}`)" if frame else ""
    data_dependent = "data-dependent" in text or "GuardOnDataDependent" in type(exc).__name__
    return ModelLoadError(
        f"torch.export failed: {first}{code}", where=where,
        hint="the value depends on the input's data: compute both branches and pick with "
             "torch.where, or use torch.cond, instead of Python control flow on a tensor"
        if data_dependent else "the model must be traceable by torch.export (see "
                               "https://pytorch.org/docs/stable/export.html)")


def float64_golden(exported: ExportedModel, run, model, where: str) -> ExportedModel:
    """The golden outputs from the model run eagerly in float64 on the same samples (float
    inputs widened; float outputs rounded back to the types eager float32 gives), with a note of
    how far eager float32 is from them: the yardstick for the module's own error."""
    import copy
    if isinstance(model, Program):
        raise ConfigError("`validation.reference: float64` needs the model's Python factory "
                          "(an exported .pt2 program is fixed to its own dtypes)",
                          where=where, key="validation.reference",
                          hint="use `model: {python: module:factory}`, or leave the reference "
                               "at float32")
    wide = copy.deepcopy(run).double()

    def widened(sample):
        return tuple(s.astype(np.float64) if s.dtype.kind == "f" else s for s in sample)

    def rounded(outputs, like):
        return tuple(o.astype(g.dtype) if o.dtype.kind == "f" else o
                     for o, g in zip(outputs, like))
    try:
        exact = [eager_outputs(wide, widened(s))
                 for s in (exported.samples, *exported.more_samples)]
    except Exception as exc:  # user code: a float32 tensor it makes meets a float64 one
        raise ConfigError(f"the model does not run in float64: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", where=where,
                          key="validation.reference",
                          hint="make the model follow its inputs' dtype, or leave the "
                               "reference at float32") from None
    goldens = [exported.golden, *exported.more_golden]
    per_output, scale = [0.0] * len(goldens[0]), 0.0
    for wide_out, narrow in zip(exact, goldens):
        for i, (w, n) in enumerate(zip(wide_out, narrow)):
            if w.dtype.kind == "f" and w.size:
                per_output[i] = max(per_output[i], float(np.max(np.abs(w - n.astype(np.float64)))))
                scale = max(scale, float(np.max(np.abs(w))))
    worst = max(per_output, default=0.0)
    note = (f"golden outputs from eager float64 (`validation.reference: float64`): eager "
            f"float32 is off from them by {worst:.3g} at most (largest |output| {scale:.3g}); "
            "the module's error in `edgekit validate` reads against that")
    return dataclasses.replace(
        exported, golden=rounded(exact[0], goldens[0]),
        more_golden=tuple(rounded(e, g) for e, g in zip(exact[1:], goldens[1:])),
        reference=f"{exported.reference} in float64", notes=(*exported.notes, note),
        float32_error=tuple(per_output))


def eager_outputs(run, samples: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The tensors `run` returns on `samples`, flattened, as numpy arrays."""
    args = tuple(torch.from_numpy(np.array(s)) for s in samples)
    with torch.no_grad():
        flat, _ = pytree.tree_flatten(run(*args))
    return tuple(t.detach().contiguous().numpy() for t in flat if isinstance(t, torch.Tensor))


def _call_factory(recipe: Recipe, spec: str):
    factory = import_callable(recipe, spec, "model factory")
    try:
        result = factory()
    except Exception as exc:  # user code: report it as a load failure, not a crash
        raise ModelLoadError(f"factory '{spec}' raised {type(exc).__name__}: {exc}",
                             where=str(recipe.path)) from None
    if isinstance(result, torch.nn.Module):
        return result.eval(), None
    if (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        examples = result[1] if isinstance(result[1], tuple) else (result[1],)
        return result[0].eval(), tuple(t.detach().numpy() for t in examples)
    raise ModelLoadError(f"factory '{spec}' returned {type(result).__name__}",
                         where=str(recipe.path),
                         hint="return an nn.Module, or (nn.Module, example_inputs)")


def _load_exported(path: Path) -> Program:
    try:
        # unpickles: the file the recipe's `model.exported` names — the user's own model,
        # trusted as a `python:` factory is (never a file from a device or a channel)
        return torch.export.load(str(path))
    except Exception as exc:  # torch raises many kinds for a bad archive
        raise ModelLoadError(f"cannot load exported program: {exc}", where=str(path),
                             hint="save it with torch.export.save(program, 'model.pt2')") from None


def _argument_names(model, count: int) -> tuple[str, ...]:
    if isinstance(model, Program):
        names = [s.arg.name for s in model.graph_signature.input_specs
                 if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    else:
        names = list(inspect.signature(model.forward).parameters)
    names = names[:count]
    return tuple(names) + tuple(f"input_{i}" for i in range(len(names), count))


def program_digest(program: Program) -> str:
    """Identity of an exported model: its graph with every node's shape and dtype (the same
    code at another input shape is another model), signature and every weight's bytes."""
    h = hashlib.sha256()
    h.update(program.graph_module.print_readable(print_output=False).encode())
    h.update(str(program.graph_signature).encode())
    for name, tensor in sorted({**program.state_dict, **program.constants}.items()):
        if isinstance(tensor, torch.Tensor):
            t = tensor.detach().contiguous().cpu()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def dynamic_shapes(recipe: Recipe):
    if not recipe.dynamic_dims:
        return None
    dims = {name: torch.export.Dim(name, min=d.min, max=d.max)
            for name, d in recipe.dynamic_dims.items()}
    return tuple({axis: dims[size] for axis, size in enumerate(spec.shape) if isinstance(size, str)}
                 or None for spec in recipe.inputs)


# --- `edgekit check`: one ATen op at a time ------------------------------------------------------

def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    name = getattr(target, "name", None)
    if callable(name):
        return name()                       # e.g. "aten::atan2"
    return getattr(target, "__name__", str(target))


class _OneOp(torch.nn.Module):
    def __init__(self, target, args, kwargs, tensor_slots):
        super().__init__()
        self.target, self.args_template, self.kwargs = target, args, kwargs
        self.tensor_slots = tensor_slots

    def forward(self, *tensors):
        args = list(self.args_template)
        for slot, tensor in zip(self.tensor_slots, tensors):
            args[slot] = tensor
        return self.target(*args, **self.kwargs)


def _import_single_aten(node: torch.fx.Node) -> bytes:
    """One ATen op with example tensors shaped like its operands in the real graph."""
    args, slots, examples = [], [], []
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node):
            val = arg.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise ValueError(f"operand {i} is not a tensor")
            examples.append(_example(val))
            slots.append(i)
            args.append(None)
        elif isinstance(arg, (list, tuple)) and any(isinstance(a, torch.fx.Node) for a in arg):
            raise ValueError("list-of-tensor operands are checked with the whole model")
        else:
            args.append(arg)
    program = torch.export.export(_OneOp(node.target, args, dict(node.kwargs), slots),
                                  tuple(examples))
    return torch_mlir.import_program(program)


def _example(val: torch.Tensor) -> torch.Tensor:
    shape = tuple(int(d) for d in val.shape)
    if val.dtype.is_floating_point:
        return torch.rand(shape, dtype=val.dtype) + 0.5
    if val.dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool)
    return torch.ones(shape, dtype=val.dtype)
