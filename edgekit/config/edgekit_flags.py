"""edgekit's own options, written among compile flags (recipes' `compile.flags`, profiles' tune
flag sets) as `--edgekit-NAME=VALUE`, so a flag set can pair a graph rewrite with the IREE flags
it needs. They are consumed before lowering and never reach iree-compile."""

from __future__ import annotations

PREFIX = "--edgekit-"
OPTIONS = {"convs-as-matmul": "max output pixels (an integer >= 1)"}


def parse_edgekit_flags(flags: tuple[str, ...]) -> dict[str, int]:
    """{option: value} of the `--edgekit-…` flags; ValueError for an unknown or bad one."""
    options: dict[str, int] = {}
    for flag in flags:
        if not flag.startswith(PREFIX):
            continue
        name, _, value = flag[len(PREFIX):].partition("=")
        if name not in OPTIONS or not value.isdigit() or int(value) < 1:
            known = ", ".join(f"{PREFIX}{k}=N ({v})" for k, v in OPTIONS.items())
            raise ValueError(f"unknown or malformed edgekit option {flag!r}; edgekit's own "
                             f"options: {known}")
        options[name] = int(value)
    return options


def without_edgekit_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in flags if not f.startswith(PREFIX))
