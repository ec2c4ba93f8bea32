"""`torch.compile(fn, backend="edgekit")`: captured graphs go through torch-mlir and IREE and
run through the IREE runtime, here or on a remote device. See backend.py."""

from edgekit.compile.backend import edgekit_backend
from edgekit.compile.inspect import GraphCode, run_and_get_code
from edgekit.compile.runners import call_stats

__all__ = ["GraphCode", "call_stats", "edgekit_backend", "run_and_get_code"]
