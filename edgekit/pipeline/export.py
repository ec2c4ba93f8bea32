"""Stage `export`: torch.export (functionalized: in-place ops and buffers become pure) + digest +
golden outputs from the original model."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils import _pytree as pytree

from edgekit.config.recipe import Recipe
from edgekit.errors import ModelLoadError
from edgekit.models.bundle import QuantizationNote, TensorSig
from edgekit.pipeline.load import LoadedModel


if TYPE_CHECKING:
    import onnx

@dataclass(frozen=True)
class ExportedModel:
    program: "torch.export.ExportedProgram | onnx.ModelProto"  # what torch-mlir imports
    digest: str                            # sha256 of graph + weights: the model's identity
    samples: tuple[np.ndarray, ...]
    golden: tuple[np.ndarray, ...]         # the original model's outputs on `samples`
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    quantization: QuantizationNote | None = None  # set by the quantize stage
    rewrites: tuple[str, ...] = ()         # graph rewrites applied before lowering (what, how many)


def export_model(recipe: Recipe, loaded: LoadedModel) -> ExportedModel:
    if not isinstance(loaded.model, (torch.nn.Module, torch.export.ExportedProgram)):
        return _onnx_model(recipe, loaded)
    args = tuple(torch.from_numpy(np.array(s)) for s in loaded.samples)
    if isinstance(loaded.model, torch.export.ExportedProgram):
        program = loaded.model
        run = program.module()
    else:
        try:
            program = torch.export.export(loaded.model, args,
                                          dynamic_shapes=dynamic_shapes(recipe))
        except Exception as exc:  # torch.export raises many kinds; all mean "cannot export"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelLoadError(f"torch.export failed: {first}", where="stage export",
                                 hint="the model must be traceable by torch.export "
                                      "(no data-dependent Python control flow)") from None
        run = loaded.model
    shapes = [_declared_shape(recipe, i, s) for i, s in enumerate(loaded.samples)]
    return exported_with_golden(program, run, tuple(loaded.samples), loaded.input_names, shapes)


def exported_with_golden(program: torch.export.ExportedProgram, run,
                         samples: tuple[np.ndarray, ...], names: tuple[str, ...],
                         shapes: list) -> ExportedModel:
    """An ExportedModel whose golden outputs come from running `run` (the original model) on
    the samples."""
    args = tuple(torch.from_numpy(np.array(s)) for s in samples)
    with torch.no_grad():
        flat, _ = pytree.tree_flatten(run(*args))
    golden = tuple(t.detach().contiguous().numpy() for t in flat if isinstance(t, torch.Tensor))
    return _with_signature(program, program_digest(program), names, shapes, samples, golden)


def _with_signature(program, digest: str, names: tuple[str, ...], shapes: list,
                    samples: tuple[np.ndarray, ...], golden: tuple[np.ndarray, ...]
                    ) -> ExportedModel:
    """The ExportedModel, with input signatures as declared and outputs as the golden run
    produced them."""
    inputs = tuple(TensorSig(name=name, shape=shape, dtype=str(s.dtype))
                   for name, shape, s in zip(names, shapes, samples))
    outputs = tuple(TensorSig(name=f"output_{i}", shape=g.shape, dtype=str(g.dtype))
                    for i, g in enumerate(golden))
    return ExportedModel(program=program, digest=digest, samples=tuple(samples), golden=golden,
                         inputs=inputs, outputs=outputs)


def _onnx_model(recipe: Recipe, loaded: LoadedModel) -> ExportedModel:
    """ONNX needs no export: its golden outputs come from onnxruntime, unoptimized."""
    from edgekit.pipeline.onnx_source import onnx_digest, run_onnxruntime
    golden = run_onnxruntime(loaded.model, loaded.input_names, loaded.samples)
    shapes = [_declared_shape(recipe, i, s) for i, s in enumerate(loaded.samples)]
    return _with_signature(loaded.model, onnx_digest(loaded.model), loaded.input_names, shapes,
                           tuple(loaded.samples), golden)


def program_digest(program: torch.export.ExportedProgram) -> str:
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


def _declared_shape(recipe: Recipe, index: int, sample: np.ndarray) -> tuple[int | str, ...]:
    if index < len(recipe.inputs):
        return recipe.inputs[index].shape
    return sample.shape
