"""Frontends by source kind: a PyTorch frontend (python factory, .pt2) and an ONNX frontend
supply load, golden outputs, quantization hooks, graph rewrites and import (base.py). The
registry (registry.py) chooses one from the recipe's `model:`; nothing after import asks which.
"""

from edgekit.pipeline.frontends.base import CheckScope, Frontend, OpModule

__all__ = ["CheckScope", "Frontend", "OpModule"]
