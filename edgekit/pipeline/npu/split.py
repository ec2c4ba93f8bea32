"""Pure logic of an NPU build's report: which ops run where (and the share of MACs on the
NPU), and the NPU compiler's estimate read from its report. No toolchain here."""

from __future__ import annotations

from collections import Counter

from edgekit.models.bundle import NpuEstimate, NpuOp


def placed_ops(rows: list[dict]) -> tuple[NpuOp, ...]:
    """The partitioner's per-node rows (toolchain/venv_scripts/et_tosa.py's result.json) as NpuOps:
    compute ops wherever they run, plus data movement and (de)quantization left on the CPU
    (the NPU partitions' own bookkeeping is not listed: it is part of the NPU graph)."""
    ops = []
    for row in rows:
        if row["placement"] == "npu" and row.get("kind") == "bookkeeping":
            continue
        ops.append(NpuOp(op=row["op"], placement=row["placement"], reason=row.get("reason", ""),
                         macs=int(row.get("macs", 0))))
    return tuple(ops)


def mac_share(ops: tuple[NpuOp, ...]) -> float | None:
    """Share (0..1) of the model's multiply-accumulates in ops on the NPU; None: no MACs."""
    total = sum(o.macs for o in ops)
    return sum(o.macs for o in ops if o.placement == "npu") / total if total else None


BOUNDARY = "boundary (de)quantization or data movement kept on the CPU"


def is_boundary(op: NpuOp) -> bool:
    """A quantize/dequantize or reshape at a partition's edge: no compute of the model's."""
    return op.placement == "cpu" and op.reason == BOUNDARY


def split_line(ops: tuple[NpuOp, ...], share: float | None) -> str:
    """One line: how many ops run where, and the MAC share."""
    npu = [o for o in ops if o.placement == "npu"]
    cpu = [o for o in ops if o.placement == "cpu" and not is_boundary(o)]
    bad = [o for o in ops if o.placement == "unsupported"]
    edges = sum(1 for o in ops if is_boundary(o))
    macs = f"{share * 100:.1f}% of MACs on the NPU" if share is not None else "no MACs"
    text = f"{len(npu)} ops on the NPU, {len(cpu)} on the CPU ({macs})"
    text += f", {len(bad)} unsupported" if bad else ""
    return text + (f"; {edges} boundary (de)quantize/reshape op(s) on the CPU" if edges else "")


def cpu_summary(ops: tuple[NpuOp, ...], limit: int = 6) -> str:
    """The CPU fallback ops (boundary ones aside), counted by name, with the first reason of
    each."""
    cpu = [o for o in ops if o.placement != "npu" and not is_boundary(o)]
    counts = Counter(o.op for o in cpu)
    reasons = {}
    for o in cpu:
        reasons.setdefault(o.op, o.reason)
    parts = [f"{op} ×{n}" + (f" ({reasons[op]})" if reasons[op] else "")
             for op, n in counts.most_common(limit)]
    more = len(counts) - limit
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


def estimate_line(estimate: NpuEstimate) -> str:
    if estimate.cycles is None:
        return f"estimate: none ({estimate.source})"
    ms = estimate.cycles / estimate.clock_hz * 1e3 if estimate.clock_hz else None
    time = f", {ms:.3f} ms" if ms is not None else ""
    return (f"estimate ({estimate.source}): {estimate.cycles:,} cycles at "
            f"{(estimate.clock_hz or 0) / 1e6:.0f} MHz{time}, "
            f"{estimate.inferences_per_s:,.0f} inferences/s, SRAM {estimate.sram_kib} KiB, "
            f"DRAM {estimate.dram_kib} KiB")
