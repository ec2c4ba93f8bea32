"""The NPU build's report logic: placements, MAC share, Vela's summary read as an estimate."""

import pytest

from edgekit.models.bundle import NpuOp
from edgekit.pipeline.npu import ethos, split

ROWS = [
    {"op": "quantize_per_tensor", "placement": "cpu", "kind": "bookkeeping",
     "reason": split.BOUNDARY, "macs": 0},
    {"op": "dequantize_per_tensor", "placement": "npu", "kind": "bookkeeping", "macs": 0},
    {"op": "convolution", "placement": "npu", "kind": "compute", "macs": 300},
    {"op": "atan2", "placement": "cpu", "kind": "compute", "reason": "no INT form", "macs": 0},
    {"op": "linear", "placement": "cpu", "kind": "compute", "reason": "too wide", "macs": 100},
]


def test_placed_ops_keep_compute_and_cpu_bookkeeping_but_not_the_npu_graphs_own():
    ops = split.placed_ops(ROWS)
    assert [o.op for o in ops] == ["quantize_per_tensor", "convolution", "atan2", "linear"]


def test_mac_share_counts_macs_on_the_npu():
    ops = split.placed_ops(ROWS)
    assert split.mac_share(ops) == pytest.approx(0.75)
    assert split.mac_share((NpuOp(op="relu", placement="npu"),)) is None


def test_split_line_sets_boundary_ops_apart():
    line = split.split_line(split.placed_ops(ROWS), 0.75)
    assert line.startswith("1 ops on the NPU, 2 on the CPU (75.0% of MACs on the NPU)")
    assert "1 boundary" in line
    assert "atan2 ×1 (no INT form)" in split.cpu_summary(split.placed_ops(ROWS))


def test_vela_summaries_add_up_as_one_estimate(tmp_path):
    header = ("core_clock,system_config,memory_mode,cycles_total,sram_memory_used,"
              "dram_memory_used\n")
    for i, cycles in enumerate((1000, 3000)):
        (tmp_path / f"p{i}.csv").write_text(header + f"5e8,Sys,Mode,{cycles},10.5,2.0\n")
    estimate = ethos.vela_estimate(sorted(tmp_path.glob("*.csv")), "5.2.0")
    assert estimate.cycles == 4000 and estimate.clock_hz == 500_000_000
    assert estimate.inferences_per_s == pytest.approx(125_000)
    assert estimate.sram_kib == 10.5 and estimate.dram_kib == 4.0
    assert "estimate" in estimate.source and "Sys" in estimate.source
    assert split.estimate_line(estimate).startswith("estimate (Vela 5.2.0 static estimate")
