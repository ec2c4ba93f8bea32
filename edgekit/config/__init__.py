"""Configuration: recipe and target-profile schemas (submodules), and — as attributes of this
module, like `torch._inductor.config` — the settings of the `torch.compile` backend.

Set them in Python before compiling::

    import edgekit.config
    edgekit.config.target = "rpi4"               # compile the graphs for that profile
    edgekit.config.device = "lab-aarch64-1"      # run compiled graphs on that device

Their defaults come from environment variables read when edgekit is imported:
EDGEKIT_TARGET, EDGEKIT_LOWERING, EDGEKIT_DEVICE, EDGEKIT_IDENTITY, EDGEKIT_FLAGS (flags
separated by spaces). `torch.compile(fn, backend="edgekit", options={...})` overrides both for
that compile. Precedence: options > attributes set here > environment > built-in defaults.
"""

from __future__ import annotations

import os
import shlex

#: target profile name or YAML path the graphs are compiled for
target: str = os.environ.get("EDGEKIT_TARGET", "host")
#: auto | tosa | linalg | torch
lowering: str = os.environ.get("EDGEKIT_LOWERING", "auto")
#: None: run on this machine; else a registered device name or user@host[:port]
device: str | None = os.environ.get("EDGEKIT_DEVICE") or None
#: private key for `device` (default: the registered device's)
identity: str | None = os.environ.get("EDGEKIT_IDENTITY") or None
#: extra iree-compile flags
flags: tuple[str, ...] = tuple(shlex.split(os.environ.get("EDGEKIT_FLAGS", "")))

COMPILE_SETTINGS = ("target", "lowering", "device", "identity", "flags")
