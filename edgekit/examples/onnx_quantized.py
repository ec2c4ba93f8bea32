"""ONNX forms of the in-tree example models, fp32 and quantized by onnxruntime (QDQ or
QOperator format), for tests, benchmarks and trying the ONNX int8 path by hand."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from edgekit.examples import models


def export_quantized(directory: Path, name: str, input_name: str,
                     formats: tuple[str, ...] = ("QDQ",)) -> dict[str, Path]:
    """`name` is a factory in edgekit.examples.models with a `<name>_calibration`. Writes
    `<name>.onnx` (fp32) and `<name>_<format>.onnx` per format (per-channel int8 weights, int8
    activations, calibrated on the factory's calibration batches); returns the paths by
    format ("fp32", "QDQ", "QOperator")."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    model, example = getattr(models, name)()
    calibration = getattr(models, f"{name}_calibration")
    paths = {"fp32": directory / f"{name}.onnx"}
    with warnings.catch_warnings():  # the tracer's notes about Python-level shape arithmetic
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(paths["fp32"]), dynamo=False,
                          input_names=[input_name], opset_version=17)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{input_name: b[0].numpy()} for b in calibration()])

        def get_next(self):
            return next(self.batches, None)

    for fmt in formats:
        paths[fmt] = directory / f"{name}_{fmt.lower()}.onnx"
        quantize_static(str(paths["fp32"]), str(paths[fmt]), Reader(),
                        quant_format=getattr(QuantFormat, fmt), per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return paths
