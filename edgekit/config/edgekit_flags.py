"""edgekit's own options, written among compile flags (recipes' `compile.flags`, profiles' tune
flag sets) as `--edgekit-NAME=VALUE`, so a flag set can pair a graph rewrite with the IREE flags
it needs. They are consumed before lowering and never reach iree-compile."""

from __future__ import annotations

import re

PREFIX = "--edgekit-"
OPTIONS = {"convs-as-matmul": "max output pixels (an integer >= 1)",
           "softmax-by-columns": "min rows (an integer >= 1)",
           # which convolutions (their order in the exported graph, from 0) become im2col +
           # matmul: the per-convolution choice `edgekit tune --conv-choice` measures
           "im2col-convs": "all, or convolution indices from 0 (e.g. 0,3,5-9)",
           "fold-batchnorm": "on (fold eval-mode BatchNorm into the convolution before it)",
           "pointwise-as-matmul": "on (1x1 convolutions as channels-last matmuls)",
           # int8 builds: quantized convolutions as int8 im2col + integer matmul, which data
           # tiling puts on dot-product instructions (pipeline/rewrite_int8.py)
           "int8-convs-as-matmul": "on or u8 (int8 convolutions as integer im2col + matmul; "
                                   "u8: the patches as uint8, for x86 VNNI's u8 x s8)",
           # per-dispatch configurations `edgekit tune` found (tune/dispatch_configs.py), by
           # the sha256 of their content: the digest, not a path, enters the build key
           "dispatch-configs": "sha256 of a tuned dispatch configuration set (64 hex digits)"}
_INTEGER = {"convs-as-matmul", "softmax-by-columns"}
_VALID = {**{name: lambda v: v.isdigit() and int(v) >= 1 for name in _INTEGER},
          "im2col-convs": lambda v: v == "all" or _SELECTION.fullmatch(v) is not None,
          "fold-batchnorm": lambda v: v == "on",
          "pointwise-as-matmul": lambda v: v == "on",
          "int8-convs-as-matmul": lambda v: v in ("on", "u8"),
          "dispatch-configs": lambda v: re.fullmatch(r"[0-9a-f]{64}", v) is not None}

_SELECTION = re.compile(r"\d+(-\d+)?(,\d+(-\d+)?)*")


def parse_edgekit_flags(flags: tuple[str, ...]) -> dict[str, int | str]:
    """{option: value} of the `--edgekit-…` flags; ValueError for an unknown or bad one."""
    options: dict[str, int | str] = {}
    for flag in flags:
        if not flag.startswith(PREFIX):
            continue
        name, _, value = flag[len(PREFIX):].partition("=")
        if name not in OPTIONS or not _VALID[name](value):
            known = ", ".join(f"{PREFIX}{k}=… ({v})" for k, v in OPTIONS.items())
            raise ValueError(f"unknown or malformed edgekit option {flag!r}; edgekit's own "
                             f"options: {known}")
        options[name] = int(value) if name in _INTEGER else value
    return options


def without_edgekit_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in flags if not f.startswith(PREFIX))


def conv_selection(value: str) -> frozenset[int] | None:
    """The convolution indices an `im2col-convs` value names (None: all of them)."""
    if value == "all":
        return None
    chosen: set[int] = set()
    for part in value.split(","):
        first, _, last = part.partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return frozenset(chosen)


def format_selection(indices) -> str:
    """The compact `im2col-convs` value for these indices: runs as first-last (0,3,5-9)."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
