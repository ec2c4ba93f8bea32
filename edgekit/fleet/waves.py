"""Batch policy, separate from execution: which devices go in which wave, and when a wave's
failures halt the rollout. Same semantics as Ansible's `serial` and `max_fail_percentage`
(ansible/executor/playbook_executor.py `_get_serialized_batches`), plus a canary wave that
takes the first devices of *each* target profile, since a bad build for one board does not
show on another board's canary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from edgekit.config.fleet import Count

T = TypeVar("T")


def to_count(value: Count, total: int, minimum: int = 1) -> int:
    """'10%' of `total` (rounded down, at least `minimum`) or a plain count."""
    if isinstance(value, str) and value.endswith("%"):
        return int(int(value[:-1]) / 100 * total) or minimum
    return int(value)


def plan_waves(items: Sequence[T], target_of, canary: Count | None,
               waves: Sequence[Count]) -> list[list[T]]:
    """Split `items` (inventory order) into waves. Percentages are of the whole fleet; the
    last wave size repeats until every item is placed."""
    remaining = list(items)
    batches: list[list[T]] = []
    if canary is not None and remaining:
        by_target: dict[str, list[T]] = {}
        for item in remaining:
            by_target.setdefault(target_of(item), []).append(item)
        first = []
        for members in by_target.values():
            first += members[:to_count(canary, len(members))]
        batches.append(first)
        taken = {id(i) for i in first}      # by identity: linear, whatever the fleet's size
        remaining = [i for i in remaining if id(i) not in taken]
    sizes = list(waves) or ["100%"]
    index = 0
    while remaining:
        size = to_count(sizes[index], len(items))
        batches.append(remaining[:size])
        remaining = remaining[size:]
        index = min(index + 1, len(sizes) - 1)
    return batches


def halts(failed: int, wave_size: int, max_fail: Count) -> bool:
    """More failures than allowed (exceeded, not equalled) in this wave."""
    if isinstance(max_fail, str) and max_fail.endswith("%"):
        return wave_size > 0 and 100 * failed / wave_size > int(max_fail[:-1])
    return failed > int(max_fail)
