"""The PyTorch side of an NPU build's quantization (a family that partitions with ExecuTorch):
ExecuTorch's TOSAQuantizer runs in its own venv on a saved ExportedProgram and returns another
one; these are the few steps that touch torch on this side of that file protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, ModelLoadError
from edgekit.pipeline.export import ExportedModel


def require_pytorch(exported: ExportedModel, recipe: Recipe, target: str) -> None:
    if not isinstance(exported.program, torch.export.ExportedProgram):
        raise ConfigError(f"target {target}: NPU builds start from a PyTorch model (an ONNX "
                          "model has no ExecuTorch path)", where=str(recipe.path), key="model",
                          hint="export the model with torch.export (.pt2) or give a python "
                               "factory")


def save_float(exported: ExportedModel, path: Path) -> None:
    torch.export.save(exported.program, str(path))


def load_quantized(path: Path) -> tuple[torch.export.ExportedProgram, str]:
    """The quantized program the venv wrote, and its digest (the model's identity)."""
    from edgekit.pipeline.frontends.torch import program_digest
    # the quantize/dequantize ops are torchao's: registered before the program is read
    import torchao.quantization.pt2e.quantize_pt2e  # noqa: F401
    try:
        # unpickles: the file is the executorch venv's answer, written into this build's own
        # private scratch directory (never a file a user handed over)
        program = torch.export.load(str(path))
    except Exception as exc:  # torch raises many kinds for an archive it cannot read
        raise ModelLoadError(f"reading the NPU quantizer's program failed: {exc}",
                             where="stage quantize (npu)") from None
    return program, program_digest(program)


def fp32_runner(exported: ExportedModel):
    """The float model as a function of one sample (the accuracy report's reference)."""
    from edgekit.pipeline.frontends.torch import eager_outputs
    module = exported.program.module()

    def run(sample: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return eager_outputs(module, sample)
    return run


def reference_name(executorch: str) -> str:
    return f"quantized PyTorch {torch.__version__} (ExecuTorch {executorch} TOSAQuantizer)"
