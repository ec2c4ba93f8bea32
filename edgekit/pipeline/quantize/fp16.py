"""The PyTorch reference of an `fp16` build: contraction inputs rounded to f16, math in f32.

That is what IREE's `--iree-global-opt-demote-contraction-inputs-type=f16` compiles (the
profile's fp16 flags): the LHS and RHS of every matmul and convolution are truncated to f16,
accumulation and everything else stays f32. Running the fp32 graph under this mode gives the
golden outputs such a module must reproduce, so on-device validation checks the compiler and
the device, and the accuracy report measures what the demotion costs.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# op → positions of its two contraction inputs (bias and other arguments stay f32)
_OPERANDS = {
    aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2),
    aten.baddbmm.default: (1, 2), aten.convolution.default: (0, 1),
}


def _to_f16_and_back(value):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(torch.float16).to(torch.float32)
    return value


class Fp16Contractions(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        positions = _OPERANDS.get(func)
        if positions:
            args = tuple(_to_f16_and_back(a) if i in positions else a for i, a in enumerate(args))
        return func(*args, **(kwargs or {}))
