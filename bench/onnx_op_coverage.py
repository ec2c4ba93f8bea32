#!/usr/bin/env python3
"""How many ONNX operator types edgekit's path handles end to end on the host.

Counting rule (printed with the result): every operator of the default ONNX domain at opset 17
whose inputs all accept tensor(float) and which has no required attribute gets a one-node model
with float inputs of shape [2, 8] (only the required inputs), values in (0.1, 0.9) so that
domain-limited functions (acos, log, sqrt…) are defined. onnxruntime (graph optimizations off)
must run it — ops it cannot run this way are "not constructible" and left out of the count. An op
is *handled* when torch-mlir imports it, some lowering (profile order: tosa, linalg, torch) and
iree-compile for `host` succeed, and the IREE module's outputs match onnxruntime's
(|a-e| <= 1e-4 + 1e-3|e|).

    python bench/onnx_op_coverage.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.pipeline.onnx_source import run_onnxruntime  # noqa: E402
from edgekit.toolchain import iree, torch_mlir  # noqa: E402

OPSET = 17


def candidates():
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx") and schema.since_version <= OPSET \
                and not schema.deprecated:
            yield schema


def latest_schemas():
    latest = {}
    for s in candidates():
        if s.name not in latest or s.since_version > latest[s.name].since_version:
            latest[s.name] = s
    return dict(sorted(latest.items()))


def float_only(schema) -> bool:
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    for formal in schema.inputs[: schema.min_input]:
        allowed = constraints.get(formal.type_str, [formal.type_str])
        if "tensor(float)" not in allowed:
            return False
    required = [a for a in schema.attributes.values() if a.required]
    return schema.min_input > 0 and not required


def one_node_model(schema):
    names = [f"in{i}" for i in range(schema.min_input)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in names]
    outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.UNDEFINED, None)
               for i in range(schema.min_output)]
    node = helper.make_node(schema.name, names, [o.name for o in outputs])
    model = helper.make_model(helper.make_graph([node], schema.name, inputs, outputs),
                              opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out in model.graph.output:  # the importer wants typed outputs
        inferred = {v.name: v for v in model.graph.value_info}
        if out.name in inferred:
            out.CopyFrom(inferred[out.name])
    return model, names


def check(schema, target, rng):
    try:
        model, names = one_node_model(schema)
        samples = tuple(rng.uniform(0.1, 0.9, size=(2, 8)).astype(np.float32) for _ in names)
        expected = run_onnxruntime(model, tuple(names), samples)
    except Exception as exc:  # not constructible this generic way: left out of the count
        return "not constructible", str(exc).splitlines()[0][:120]
    try:
        imported = torch_mlir.import_onnx(model)
    except torch_mlir.LowerFailure as f:
        return "import failed", (f.ops or ("?",))[0]
    for lowering in target.lowering:
        try:
            module = torch_mlir.lower(imported, lowering)
        except torch_mlir.LowerFailure:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            src, vmfb = Path(tmp) / "m.mlirbc", Path(tmp) / "m.vmfb"
            src.write_bytes(module)
            try:
                iree.compile_module(src, vmfb, iree.compile_flags(target, lowering))
            except iree.CompileFailure:
                continue
            ins = [Path(tmp) / f"i{i}.npy" for i in range(len(samples))]
            outs = [Path(tmp) / f"o{i}.npy" for i in range(len(expected))]
            for p, a in zip(ins, samples):
                np.save(p, a)
            try:
                iree.run_module(vmfb, "local-sync", "main", ins, outs)
            except Exception:
                return "run failed", lowering
            got = [np.load(p) for p in outs]
            ok = all(g.shape == e.shape and np.allclose(g, e, atol=1e-4, rtol=1e-3,
                                                         equal_nan=True)
                     for g, e in zip(got, expected))
            return ("handled", lowering) if ok else ("wrong numbers", lowering)
    return "no lowering compiled", ""


def isolated(fn, *args):
    """Run fn in a forked child: an op that crashes the importer (it happens) is recorded as
    crashed instead of ending the count."""
    import os
    import signal
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            payload = json.dumps(fn(*args)).encode()
        except BaseException as exc:  # the child must always exit here
            payload = json.dumps(["failed", f"{type(exc).__name__}: {exc}"[:120]]).encode()
        os.write(write, payload)
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return ["crashed", signal.Signals(os.WTERMSIG(status)).name]
    return json.loads(b"".join(chunks) or b'["crashed", "no result"]')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    target = load_target("host")
    rng = np.random.default_rng(0)
    schemas = latest_schemas()
    rows = {}
    for name, schema in schemas.items():
        rows[name] = tuple(isolated(check, schema, target, rng)) if float_only(schema) else \
            ("not float-only or needs attributes", "")
    counted = {n: r for n, r in rows.items() if r[0] not in
               ("not constructible", "not float-only or needs attributes")}
    handled = sorted(n for n, r in counted.items() if r[0] == "handled")
    print(f"ONNX default domain at opset {OPSET}: {len(schemas)} operator types")
    print(f"generic one-node models possible and run by onnxruntime: {len(counted)}")
    print(f"handled end to end on the host: {len(handled)} / {len(counted)}")
    by_lowering = {}
    for n in handled:
        by_lowering.setdefault(counted[n][1], []).append(n)
    for lowering, ops in by_lowering.items():
        print(f"  via {lowering}: {len(ops)}")
    for n, r in counted.items():
        if r[0] != "handled":
            print(f"  not handled: {n}: {r[0]} {r[1]}")
    if opts.json:
        opts.json.write_text(json.dumps({"rows": rows, "handled": handled}, indent=1))


if __name__ == "__main__":
    main()
