"""What a model source supplies to the build: the `Frontend` interface.

A frontend is chosen once, from the recipe's `model:` (frontends/__init__.py), and travels in
the values the stages pass on (`LoadedModel.frontend`, `ExportedModel.frontend`). Its graph —
a torch.export ExportedProgram, an ONNX ModelProto — is the payload of those values, and only
the frontend looks inside it. What differs after import (e.g. which module and IREE input type a
lowering starts from) is data on the `ImportedGraph` the frontend returns, so `lower+compile`,
`check quantization`, `package` and `edgekit check` never ask which kind of model it was.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe

if TYPE_CHECKING:
    import numpy as np
    from edgekit.pipeline.export import ExportedModel
    from edgekit.pipeline.load import LoadedModel
    from edgekit.pipeline.lower import ImportedGraph

G = TypeVar("G")  # the frontend's graph: what it exports to and imports from


@dataclass(frozen=True)
class OpModule:
    """One operator type of a graph for `edgekit check`: how often it occurs, and a function
    that makes the smallest torch-backend module holding one instance of it."""

    op: str
    count: int
    make: Callable[[], bytes]


@dataclass(frozen=True)
class CheckScope:
    """Which lowerings `edgekit check` tries on the whole model (those a build would try), and
    what to tell the user about the model's quantization (or why a build refuses it: then
    `lowerings` is empty)."""

    lowerings: tuple[str, ...]
    note: str = ""


class Frontend(ABC, Generic[G]):
    """Load, export with golden outputs, quantization hooks, graph rewrites and import for one
    kind of model source."""

    kind: ClassVar[str]                  # the registry key: "pytorch", "onnx"
    sources: ClassVar[tuple[str, ...]]   # the recipe's `model:` fields this frontend reads
    importer: ClassVar[str]              # torch-mlir's importer, for messages

    @abstractmethod
    def load(self, recipe: Recipe) -> LoadedModel:
        """The model and one golden input set (in argument order)."""

    @abstractmethod
    def export(self, recipe: Recipe, loaded: LoadedModel) -> ExportedModel:
        """The graph torch-mlir imports, its digest (the model's identity) and golden outputs
        from the reference runtime (PyTorch eager, onnxruntime)."""

    @abstractmethod
    def with_quantize_mode(self, recipe: Recipe, mode: str) -> Recipe:
        """The recipe asking for another quantization mode ("none": the fp32 model)."""

    @abstractmethod
    def quantize(self, recipe: Recipe, exported: ExportedModel) -> ExportedModel:
        """The model the recipe's `quantize:` asks for, golden outputs from its reference."""

    @abstractmethod
    def rewrite(self, exported: ExportedModel, flags: tuple[str, ...]) -> ExportedModel:
        """The graph rewrites the `--edgekit-…` compile flags ask for, noted in `rewrites`."""

    @abstractmethod
    def import_graph(self, graph: G) -> ImportedGraph:
        """torch-mlir's import; raises toolchain.torch_mlir.LowerFailure."""

    def reference_outputs(self, exported: ExportedModel, samples: tuple[np.ndarray, ...]
                          ) -> tuple[np.ndarray, ...]:
        """What the reference runtime computes for `exported` on one input set (the dataset
        gate's reference score, pipeline/dataset.py)."""
        raise NotImplementedError(f"the {self.kind} frontend computes no reference outputs")

    def dataset_reference(self, recipe: Recipe, exported: ExportedModel, fp32: bool
                          ) -> Callable[[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]]:
        """The dataset gate's reference (pipeline/dataset.py): a function from one input set
        to the outputs it scores. `exported` is the float model (fp32) or the model the
        golden outputs come from; a frontend whose float model is inside the quantized one
        (ONNX QDQ) takes it out here."""
        return lambda samples: self.reference_outputs(exported, samples)

    def interchange(self, graph: G, opset: int) -> bytes:
        """The graph as an ONNX model's bytes (opset `opset` at most where the frontend makes
        it), for NPU compilers that read ONNX (an NPU family's compiler, pipeline/npu)."""
        raise NotImplementedError(f"the {self.kind} frontend gives no ONNX model")

    # `edgekit check`
    @abstractmethod
    def graph_to_check(self, recipe: Recipe) -> tuple[G, str]:
        """The graph `edgekit check` takes apart, and its digest (the build's model identity,
        under which check's verdict is kept)."""

    @abstractmethod
    def op_modules(self, graph: G) -> list[OpModule]:
        """Each operator type of the graph, cut out with its real operand shapes."""

    @abstractmethod
    def check_scope(self, graph: G, target: Target, where: str) -> CheckScope:
        """The lowerings a build of this graph would try, with a note on its quantization."""
