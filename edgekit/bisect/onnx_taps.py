"""Intermediate tensors of an ONNX model made extra graph outputs; the reference is the ONNX
frontend's own (onnxruntime, unoptimized). Module paths come from node names where the
exporter wrote them (torch.onnx: `/layer1/layer1.0/conv1/Conv`); a graph without such names
has one boundary per node."""

from __future__ import annotations

import dataclasses

import onnx
from onnx import helper

from edgekit.bisect.taps import Tap
from edgekit.config.recipe import Recipe
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.load import LoadedModel

_TAPPABLE = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
             onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32,
             onnx.TensorProto.INT64}


class OnnxGraph:
    def __init__(self, recipe: Recipe, loaded: LoadedModel):
        self.recipe, self.loaded = recipe, loaded
        self.model = onnx.shape_inference.infer_shapes(loaded.model)
        self.values = {v.name: v for v in (*self.model.graph.value_info,
                                           *self.model.graph.output)}
        self.outputs = {v.name for v in self.model.graph.output}
        self.nodes = [(node, name) for node in self.model.graph.node for name in node.output[:1]
                      if node.op_type != "Constant" and self._tappable(name)]

    def _tappable(self, name: str) -> bool:
        value = self.values.get(name)
        return value is not None and value.type.WhichOneof("value") == "tensor_type" and \
            value.type.tensor_type.elem_type in _TAPPABLE

    @staticmethod
    def _stack(node) -> list[str]:
        parts = [p for p in node.name.split("/") if p]
        return parts[:-1] if len(parts) > 1 else [node.name or node.output[0]]

    def _tap(self, node, name: str) -> Tap:
        stack = self._stack(node)
        return Tap(node=name, module=stack[-1], module_type=node.op_type,
                   op=f"onnx.{node.op_type}", output=name in self.outputs)

    def boundary_taps(self) -> list[Tap]:
        last: dict[str, str] = {}
        for node, name in self.nodes:
            for path in self._stack(node):
                last[path] = name
        chosen = set(last.values()) | self.outputs
        return [self._tap(n, name) for n, name in self.nodes if name in chosen]

    def op_taps(self, after: str | None, upto: str) -> list[Tap]:
        taps, inside = [], after is None
        for node, name in self.nodes:
            if inside:
                taps.append(self._tap(node, name))
            if name == after:
                inside = True
            if name == upto:
                break
        return taps

    def exported(self, taps: list[Tap]) -> ExportedModel:
        """The model returning the tapped tensors (in order), with onnxruntime's values."""
        return self._export(self.model, [t.node for t in taps], self.loaded.samples,
                            self.loaded.input_names)

    def _export(self, model, outputs: list[str], samples, names) -> ExportedModel:
        tapped = onnx.ModelProto()
        tapped.CopyFrom(model)
        del tapped.graph.output[:]
        tapped.graph.output.extend(self.values[n] for n in outputs)
        loaded = dataclasses.replace(self.loaded, model=tapped, samples=tuple(samples),
                                     input_names=tuple(names), more_samples=())
        return self.loaded.frontend.export(self.recipe, loaded)

    def reproducer(self, tap: Tap) -> ExportedModel:
        """The node alone, fed the values its operands have inside the model."""
        node = next(n for n, name in self.nodes if name == tap.node)
        initializers = {t.name for t in self.model.graph.initializer}
        constants = {o for n in self.model.graph.node if n.op_type == "Constant"
                     for o in n.output}
        graph_inputs = {v.name for v in self.model.graph.input}
        operands = [i for i in node.input if i and i not in initializers and i not in constants]
        values = dict(zip(self.loaded.input_names, self.loaded.samples))
        inner = [i for i in operands if i not in graph_inputs]
        if inner:
            values.update(zip(inner, self._export(self.model, inner, self.loaded.samples,
                                                  self.loaded.input_names).golden))
        known = {**self.values, **{v.name: v for v in self.model.graph.input}}
        inits = [t for t in self.model.graph.initializer if t.name in node.input]
        consts = [n for n in self.model.graph.node if n.op_type == "Constant"
                  and n.output[0] in node.input]
        graph = helper.make_graph([*consts, node], f"single_{node.op_type}",
                                  [known[i] for i in operands], [self.values[tap.node]],
                                  initializer=inits)
        single = helper.make_model(graph, opset_imports=list(self.model.opset_import),
                                   ir_version=self.model.ir_version)
        return self._export(single, [tap.node], [values[i] for i in operands], operands)
