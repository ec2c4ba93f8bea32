"""Runs INSIDE the executorch venv (never imported by edgekit): quantize an exported program
with ExecuTorch's TOSAQuantizer, partition it with TOSAPartitioner into integer TOSA 1.0
partitions, and write everything the host needs as files.

argv: request.json. Request keys: program (.pt2 of the float model), calibration (npz: c<i>_<j>),
samples (npz: s<i>_<j>), capture (how many of the samples, from the first, the partitions' data is
kept for), spec ("TOSA-1.0+INT" or "TOSA-1.0+INT+u55"), out (a folder).
Writes into out: quantized.pt2 (the quantized model, re-exported: the CPU module's source),
golden.npz (o<i>_<k>: the quantized PyTorch model's outputs per sample), part<p>.tosa (a TOSA
flatbuffer per NPU partition), part<p>.npz (i<i>_<j> / o<i>_<k>: that partition's integer inputs
and outputs per sample, from the quantized PyTorch model), result.json (ops with placement,
reason and MACs; partitions' input/output dtypes).
Standalone on purpose: only torch, torchao and executorch.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from executorch.backends.arm.quantizer.arm_quantizer import (  # noqa: E402
    TOSAQuantizer, get_symmetric_quantization_config)
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec  # noqa: E402
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402
from executorch.exir.backend import utils as backend_utils  # noqa: E402
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402

# the partitioner's reasons for leaving a node out, by node name (its reporter is local)
REJECTED: dict[str, str] = {}
_report = backend_utils.WhyNoPartitionReporter.report_reject


def _remember(self, node, reason):
    REJECTED.setdefault(node.name, " ".join(str(reason).split()))
    return _report(self, node, reason)


backend_utils.WhyNoPartitionReporter.report_reject = _remember

# ops that only move or (de)quantize data: listed, not counted as compute
BOOKKEEPING = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
               "dequantize_per_channel", "getitem", "view", "reshape", "permute", "clone",
               "_to_dim_order_copy", "expand", "squeeze", "unsqueeze", "alias", "detach")


def _tuples(npz, prefix: str) -> list[tuple[torch.Tensor, ...]]:
    rows: dict[int, dict[int, np.ndarray]] = {}
    for key in npz.files:
        if key.startswith(prefix):
            i, j = key[len(prefix):].split("_")
            rows.setdefault(int(i), {})[int(j)] = npz[key]
    return [tuple(torch.from_numpy(row[j]) for j in sorted(row)) for _, row in sorted(rows.items())]


def _shape(node) -> list[int]:
    val = node.meta.get("val")
    return list(val.shape) if isinstance(val, torch.Tensor) else []


def _macs(node) -> int:
    """Multiply-accumulates of a contraction from its shapes (0 for everything else)."""
    name = str(node.target)
    out = _shape(node)
    if not out:
        return 0
    if "convolution" in name or "conv2d" in name:
        weight = _shape(node.args[1])
        groups = node.args[8] if len(node.args) > 8 else 1
        return math.prod(out) * (weight[1] if len(weight) > 1 else 1) * math.prod(weight[2:]) \
            if groups else 0
    if any(k in name for k in ("linear", "addmm", ".mm.", "bmm", "matmul")):
        a = _shape(node.args[0]) if "addmm" not in name else _shape(node.args[1])
        return math.prod(out) * (a[-1] if a else 1)
    return 0


def _op_name(node) -> str:
    target = node.target
    name = getattr(target, "__name__", str(target))
    return name.replace("aten.", "").split(".default")[0] if isinstance(name, str) else str(name)


def _kind(name: str) -> str:
    return "bookkeeping" if any(b in name for b in BOOKKEEPING) else "compute"


def main() -> int:
    request = json.loads(Path(sys.argv[1]).read_text())
    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    spec = TosaCompileSpec(request["spec"])

    # unpickles: the program edgekit itself saved into its build's private scratch directory
    program = torch.export.load(request["program"])
    samples = _tuples(np.load(request["samples"]), "s")
    calibration = _tuples(np.load(request["calibration"]), "c")
    graph = program.module(check_guards=False)   # torch 2.13: the guards reject re-tracing

    quantizer = TOSAQuantizer(spec)
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(graph, quantizer)
    for batch in calibration:
        prepared(*batch)
    converted = convert_pt2e(prepared)
    quantized = torch.export.export(converted, samples[0], strict=False)
    torch.export.save(quantized, str(out / "quantized.pt2"))

    golden = {}
    with torch.no_grad():
        for i, sample in enumerate(samples):
            result = converted(*sample)
            result = result if isinstance(result, (tuple, list)) else (result,)
            for k, value in enumerate(result):
                golden[f"o{i}_{k}"] = value.detach().numpy()
    np.savez(out / "golden.npz", **golden)

    lowered = to_edge_transform_and_lower(quantized, partitioner=[TOSAPartitioner(spec)])
    edge = lowered.exported_program()
    top = edge.graph_module

    ops = []
    delegates = []
    for node in top.graph.nodes:
        if node.op != "call_function":
            continue
        if "executorch_call_delegate" in str(node.target):
            module = getattr(top, node.args[0].target)
            p = len(delegates)
            (out / f"part{p}.tosa").write_bytes(module.processed_bytes)
            delegates.append(node)
            for inner in module.original_module.graph.nodes:
                if inner.op == "call_function":
                    name = _op_name(inner)
                    ops.append({"op": name, "placement": "npu", "partition": p,
                                "kind": _kind(name), "macs": _macs(inner), "reason": ""})
            continue
        name = _op_name(node)
        if name == "getitem":
            continue
        reason = REJECTED.get(node.name, "")
        if reason:
            reason = f"no {request['spec']} form in ExecuTorch's Arm backend: {reason}"
        if not reason and _kind(name) == "bookkeeping":
            reason = "boundary (de)quantization or data movement kept on the CPU"
        ops.append({"op": name, "placement": "cpu", "partition": None, "kind": _kind(name),
                    "macs": _macs(node), "reason": reason or "not taken by the TOSA partitioner"})

    # each partition's integer inputs/outputs on the samples, from the quantized PyTorch
    # model: run the partitioned graph, executing every delegate by its original program
    captured = [dict() for _ in delegates]

    class Runner(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if "executorch_call_delegate" in str(target):
                module = args[0]
                result = module.original_module.module()(*args[1:])
                p = next(q for q, n in enumerate(delegates)
                         if getattr(top, n.args[0].target) is module)
                result_t = result if isinstance(result, (tuple, list)) else (result,)
                self.row[p] = ([a.detach().numpy() for a in args[1:]],
                               [r.detach().numpy() for r in result_t])
                return result_t
            return super().call_function(target, args, kwargs)

    parts = [{"file": f"part{p}.tosa", "inputs": [], "outputs": []} for p in range(len(delegates))]
    capture = int(request.get("capture", len(samples)))   # the validation samples
    with torch.no_grad():
        for i, sample in enumerate(samples[:capture]):
            runner = Runner(top)
            runner.row = {}
            runner.run(*_placeholders(edge, sample))
            for p, (ins, outs) in runner.row.items():
                for j, a in enumerate(ins):
                    captured[p][f"i{i}_{j}"] = a
                for k, r in enumerate(outs):
                    captured[p][f"o{i}_{k}"] = r
                if i == 0:
                    parts[p]["inputs"] = [{"dtype": str(a.dtype), "shape": list(a.shape)}
                                          for a in ins]
                    parts[p]["outputs"] = [{"dtype": str(r.dtype), "shape": list(r.shape)}
                                           for r in outs]
    for p, arrays in enumerate(captured):
        np.savez(out / f"part{p}.npz", **arrays)

    (out / "result.json").write_text(json.dumps({"ops": ops, "partitions": parts}, indent=1))
    return 0


def _placeholders(edge, sample):
    """The graph's placeholder values in order: parameters/buffers/constants, then inputs."""
    signature = edge.graph_signature
    values = []
    user = iter(sample)
    for spec in signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            values.append(next(user))
        elif spec.target in edge.state_dict:
            values.append(edge.state_dict[spec.target])
        else:
            values.append(edge.constants[spec.target])
    return values


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # noqa: BLE001 — the host turns this line into its error
        print(f"edgekit-npu-error: {_one_line(exc)}", file=sys.stderr)
        sys.exit(3)
