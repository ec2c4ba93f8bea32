#!/usr/bin/env python3
"""Where a module's time goes, per dispatch, from IREE's own HAL profiler.

Builds the recipe for a target that runs here (as `edgekit build` does, or as `--variant`
from the profile's tune flag sets, plus any `--flag`s), runs it under iree-benchmark-module
with `--device_profiling_mode=host-execution` (local-sync at 1 thread, the default; local-task
with `--threads N` workers, where a column says how busy the workers were in each dispatch)
and reads the .ireeprof
with `iree-profile dispatch`. For convolutions and matmuls IREE's dispatch name gives the shape,
hence the GFLOP/s each kernel reaches; the table also says how much of the wall time is spent
outside dispatches (runtime overhead, copies).

Then the same model in onnxruntime (as many intra-op threads, default graph optimizations, its
profiler: `SessionOptions.enable_profiling`), node by node, and a table per op class — conv
KxK, depthwise conv KxK, matmul, other — of who is faster and by how much. An IREE dispatch is
matched to onnxruntime's node(s) by FLOP count (a convolution that IREE runs as im2col +
matmul keeps its FLOPs), so each class compares the same arithmetic; what IREE adds around it
(im2col, packs, transposes) and onnxruntime's reorders land in "other".

    python bench/dispatch_profile.py --recipe recipes/resnet18.yaml
    python bench/dispatch_profile.py --recipe recipes/resnet18.yaml --variant tosa/data-tiling
    python bench/dispatch_profile.py --recipe recipes/mobilenet_v2.yaml --no-onnxruntime
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.pipeline.build import BuildOptions, Variant, build  # noqa: E402
from edgekit.toolchain.iree_profile import profiled_run  # noqa: E402
from edgekit.tune.dispatch_configs import DISPATCH_SHAPE, flop_count  # noqa: E402

def profile(bundle, iterations: int, work: Path, threads: int = 1
            ) -> tuple[float, list[dict]]:
    """(wall ms per call, per-dispatch rows) from one profiled iree-benchmark-module run."""
    run, groups = profiled_run(bundle, iterations, work, threads)
    wall_ms = run["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0}[run["time_unit"]]
    rows = []
    for g in groups:
        calls = g["count"] / run["iterations"]
        flops = flop_count(g["key"])
        rows.append({"dispatch": g["key"], "calls": calls, "min_ms": g["min_ns"] / 1e6,
                     "ms_per_inference": g["total_ns"] / 1e6 / run["iterations"],
                     "gflops_at_min": flops / g["min_ns"] if flops else None,
                     # the workers' time in the dispatch's tiles over threads × its wall time
                     "busy": g.get("total_tile_duration_sum_ns", 0) / threads / g["total_ns"]
                     if g["total_ns"] else None,
                     "workgroups": g.get("last_workgroup_count")})
    return wall_ms, sorted(rows, key=lambda r: -r["ms_per_inference"])


def output_of(name: str) -> tuple[int, int] | None:
    """(output pixels or rows, output channels or columns) of a conv/matmul dispatch, from its
    name: conv_HxWxCout…, matmul_like_MxNxK or _HxWxNxK, batch_matmul_BxMxNxK."""
    m = DISPATCH_SHAPE.search(name)
    if not m:
        return None
    d = [int(x) for x in m.group(2).split("x")]
    if m.group(1) == "conv" and len(d) >= 3:
        return d[0] * d[1], d[2]
    if m.group(1) == "batch_matmul" and len(d) == 4:
        return d[0] * d[1], d[2]
    if len(d) == 3:
        return d[0], d[1]
    if len(d) == 4:
        return d[0] * d[1], d[2]
    return None


# --- onnxruntime's side --------------------------------------------------------------------------

def onnx_model(recipe_path: Path, inputs) -> tuple[bytes, list[str]]:
    """The recipe's model as ONNX bytes and its input names: the file of an ONNX recipe, else
    the PyTorch model exported as bench/host_latency.py exports it (opset 17)."""
    import io
    import warnings

    import onnx
    import torch

    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    recipe = load_recipe(recipe_path)
    if recipe.model.onnx:
        model = onnx.load(str(recipe.resolve(recipe.model.onnx)))
        names = [i.name for i in model.graph.input
                 if i.name not in {t.name for t in model.graph.initializer}]
        return model.SerializeToString(), names
    module = frontend_for(recipe.model).load(recipe).model
    buffer = io.BytesIO()
    names = [f"in{i}" for i in range(len(inputs))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(torch.from_numpy(x) for x in inputs), buffer,
                          dynamo=False, input_names=names, opset_version=17)
    return buffer.getvalue(), names


def _shape(entry: dict) -> list[int]:
    return next(iter(entry.values())) if entry else []


def node_class(op: str, inputs: list[list[int]], output: list[int]
               ) -> tuple[str, float | None]:
    """(op class, FLOPs) of one onnxruntime node from its profiled shapes: convolutions by
    kernel and depthwise-ness (2·|output|·Cin/g·Kh·Kw), matmuls (2·|output|·K), and "other"
    (no FLOPs counted: elementwise, pooling, reorders)."""
    if op in ("Conv", "FusedConv") and len(inputs) > 1 and len(inputs[1]) == 4 and output:
        cout, cin_per_group, kh, kw = inputs[1]
        flops = 2.0 * math.prod(output) * cin_per_group * kh * kw
        depthwise = cin_per_group == 1 and len(inputs[0]) == 4 and inputs[0][1] > 1
        return f"conv {kh}x{kw}{' depthwise' if depthwise else ''}", flops
    if op in ("MatMul", "Gemm", "FusedMatMul", "FusedGemm") and inputs and output:
        return "matmul", 2.0 * math.prod(output) * inputs[0][-1]
    return "other", None


def ort_profile(model: bytes, names: list[str], inputs, iterations: int, work: Path,
                threads: int = 1, warmup: int = 3) -> tuple[float, list[dict]]:
    """(median ms per run, per-node rows) from onnxruntime's profiler with `threads` intra-op
    threads; the first `warmup` runs of every node are dropped."""
    import statistics

    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_profiling = True
    options.profile_file_prefix = str(work / "ort")
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    feed = dict(zip(names, inputs))
    for _ in range(warmup + iterations):
        session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    runs = [e["dur"] / 1e3 for e in events if e.get("cat") == "Session"
            and e.get("name") == "model_run"][warmup:]
    nodes: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        node = nodes.setdefault(e["name"][:-len("_kernel_time")], {
            "op": args.get("op_name", "?"),
            "inputs": [_shape(x) for x in args.get("input_type_shape", [])],
            "output": _shape((args.get("output_type_shape") or [{}])[0]), "durs": []})
        node["durs"].append(e["dur"] / 1e3)
    rows = []
    for name, node in nodes.items():
        durs = node["durs"][warmup:] or node["durs"]
        op_class, flops = node_class(node["op"], node["inputs"], node["output"])
        out = node["output"]
        if op_class.startswith("conv") and len(out) == 4:
            produces = (out[0] * out[2] * out[3], out[1])
        else:
            produces = (math.prod(out[:-1]), out[-1]) if out else None
        rows.append({"node": name, "op": node["op"], "class": op_class, "flops": flops,
                     "produces": produces,
                     "output": node["output"], "min_ms": min(durs),
                     "ms_per_inference": sum(durs) / len(durs)})
    return statistics.median(runs), sorted(rows, key=lambda r: -r["ms_per_inference"])


# onnxruntime runs CNNs in its NCHWc layout, whose channels are padded to its block (16 with
# AVX-512): its profiled shapes, hence FLOPs, include that padding (MobileNetV2's 24-channel
# convs show as 32)
NCHWC_BLOCK = 16


def _matches(flops: float, produces: tuple[int, int], shape: dict) -> float | None:
    """How much larger onnxruntime's FLOPs are (≥ 1) if `shape` is the same operation as the
    IREE dispatch (same output rows, channels equal up to onnxruntime's padding), else None."""
    if shape["produces"] is None:
        return None
    (pixels, channels), (ort_pixels, ort_channels) = produces, shape["produces"]
    ratio = shape["flops"] / flops
    if pixels == ort_pixels and 0 <= ort_channels - channels < NCHWC_BLOCK and \
            0.995 <= ratio <= 2.0:
        return ratio
    return None


def compare(iree_rows: list[dict], ort_rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(per op class, per shape). An IREE dispatch is the onnxruntime node(s) with the same
    output rows and channels (up to onnxruntime's padding) and the closest FLOPs — FLOPs alone
    collide (MobileNetV2's stem conv and a 1x1 conv at 14²); it gives them their class and
    their true FLOPs (IREE's shapes have no padding). Per shape: GFLOP/s at each side's
    fastest call; per class: the time of all calls per inference, and GFLOP/s over the matched
    shapes' calls."""
    shapes: dict[tuple, dict] = {}
    for r in ort_rows:
        if r["flops"]:
            key = (r["class"], r["flops"], r["produces"])
            s = shapes.setdefault(key, {"class": r["class"], "flops": r["flops"],
                                        "true_flops": None, "produces": r["produces"],
                                        "output": r["output"], "ort_calls": 0, "ort_ms": 0.0,
                                        "ort_min_ms": math.inf, "iree_calls": 0.0,
                                        "iree_ms": 0.0, "iree_min_ms": math.inf})
            s["ort_calls"] += 1
            s["ort_ms"] += r["ms_per_inference"]
            s["ort_min_ms"] = min(s["ort_min_ms"], r["min_ms"])
    classes: dict[str, dict] = {}

    def tally(name: str, side: str, ms: float) -> dict:
        c = classes.setdefault(name, {"class": name, "iree_ms": 0.0, "ort_ms": 0.0,
                                      "iree_matched_ms": 0.0, "ort_matched_ms": 0.0,
                                      "iree_flops": 0.0, "ort_flops": 0.0})
        c[f"{side}_ms"] += ms
        return c
    for r in iree_rows:
        flops, produces = flop_count(r["dispatch"]), output_of(r["dispatch"])
        scored = [(ratio, s) for s in shapes.values() if flops and produces
                  and (ratio := _matches(flops, produces, s)) is not None]
        if not scored:
            tally("other", "iree", r["ms_per_inference"])
            continue
        match = min(scored, key=lambda x: x[0])[1]
        match["true_flops"] = flops
        match["iree_calls"] += r["calls"]
        match["iree_ms"] += r["ms_per_inference"]
        match["iree_min_ms"] = min(match["iree_min_ms"], r["min_ms"])
        tally(match["class"], "iree", r["ms_per_inference"])
    for r in ort_rows:
        tally(r["class"], "ort", r["ms_per_inference"])
    for s in shapes.values():
        flops = s["true_flops"] or s["flops"]
        s["ort_gflops"] = flops / s["ort_min_ms"] / 1e6
        s["iree_gflops"] = flops / s["iree_min_ms"] / 1e6 if s["iree_calls"] else None
        if s["iree_calls"]:      # both sides over the same operations
            c = classes[s["class"]]
            c["iree_flops"] += flops * s["iree_calls"]
            c["iree_matched_ms"] += s["iree_ms"]
            c["ort_flops"] += flops * s["ort_calls"]
            c["ort_matched_ms"] += s["ort_ms"]
    order = {"other": 1}
    return (sorted(classes.values(), key=lambda c: (order.get(c["class"], 0), -c["ort_ms"])),
            sorted(shapes.values(), key=lambda s: -s["ort_ms"]))


def _who(iree_ms: float, ort_ms: float) -> str:
    if not iree_ms or not ort_ms:
        return ""
    return (f"IREE ×{ort_ms / iree_ms:.2f}" if iree_ms < ort_ms
            else f"onnxruntime ×{iree_ms / ort_ms:.2f}")


def print_comparison(iree_wall: float, ort_wall: float, classes: list[dict],
                     shapes: list[dict], top: int, threads: int) -> None:
    print(f"\nonnxruntime ({threads} thread(s), its profiler): {ort_wall:.2f} ms per run; IREE "
          f"{iree_wall:.2f} ms ({_who(iree_wall, ort_wall)} faster)\n")
    print("| op class | IREE ms | IREE GFLOP/s | onnxruntime ms | onnxruntime GFLOP/s | "
          "faster, by |\n|---|---|---|---|---|---|")
    for c in classes:
        rate = {side: f"{c[f'{side}_flops'] / c[f'{side}_matched_ms'] / 1e6:.1f}"
                if c[f"{side}_flops"] and c[f"{side}_matched_ms"] else ""
                for side in ("iree", "ort")}
        print(f"| {c['class']} | {c['iree_ms']:.3f} | {rate['iree']} | {c['ort_ms']:.3f} | "
              f"{rate['ort']} | {_who(c['iree_ms'], c['ort_ms'])} |")
    print("\n(ms per inference, all calls of the class; GFLOP/s over the shapes matched on "
          "both sides, with the model's FLOPs (onnxruntime's NCHWc padding not counted). "
          "IREE's \"other\": dispatches without a match — im2col, packs, transposes, "
          "elementwise)\n")
    print("| op class | output | MFLOP | calls IREE/ort | GFLOP/s IREE (fastest) | "
          "GFLOP/s onnxruntime (fastest) | faster, by |\n|---|---|---|---|---|---|---|")
    for s in shapes[:top]:
        iree = f"{s['iree_gflops']:.1f}" if s["iree_gflops"] else "unmatched"
        by = _who(s["iree_min_ms"], s["ort_min_ms"]) if s["iree_gflops"] else ""
        flops = s["true_flops"] or s["flops"]
        print(f"| {s['class']} | {'x'.join(map(str, s['output']))} | {flops / 1e6:.1f} | "
              f"{s['iree_calls']:g}/{s['ort_calls']} | {iree} | {s['ort_gflops']:.1f} | "
              f"{by} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, required=True)
    parser.add_argument("--target", default="host")
    parser.add_argument("--variant", help="LOWERING/FLAG_SET from the profile's tune flag sets "
                                          "(default: the untuned build)")
    parser.add_argument("--flag", action="append", default=[], dest="flags",
                        help="an extra compile flag on top of the variant's (repeatable)")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-onnxruntime", action="store_true",
                        help="IREE's dispatches only (no per-op comparison)")
    parser.add_argument("--threads", type=int, default=1,
                        help="workers (IREE local-task above 1; onnxruntime's intra-op threads)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgekit-dispatch-") as tmp:
        report(args, Path(tmp))


def report(args, work: Path) -> None:
    target = load_target(args.target)
    variant = None
    if args.variant:
        lowering, _, flag_set = args.variant.partition("/")
        flags = () if flag_set in ("", "default") else tuple(target.tune.flag_sets[flag_set])
        variant = Variant(lowering, flag_set or "default", flags)
    if args.flags:
        # without --variant: the profile's first lowering, default flags
        base = variant or Variant(target.lowering[0], "default", ())
        variant = Variant(base.lowering, base.flag_set + "+extra", base.flags + tuple(args.flags))
    bundle = build(BuildOptions(recipe=args.recipe, target=args.target, variant=variant,
                                use_tuned=False, out=work / "bundle")).bundle
    wall, rows = profile(bundle, args.iterations, work, args.threads)
    in_dispatches = sum(r["ms_per_inference"] for r in rows)
    print(f"\n{bundle.manifest.app} for {target.name}, {args.variant or 'untuned'} "
          f"(lowering {bundle.manifest.lowering.used}): wall {wall:.2f} ms per call, "
          f"{in_dispatches:.2f} ms in {len(rows)} dispatch kinds "
          f"({in_dispatches / wall:.0%}); " + ("1 thread, local-sync\n" if args.threads == 1
                                                 else f"{args.threads} threads, local-task\n"))
    print("| dispatch | calls | ms per call (all) | share | fastest ms | GFLOP/s at fastest |"
          " workgroups | workers busy |\n|---|---|---|---|---|---|---|---|")
    for r in rows[:args.top]:
        gflops = f"{r['gflops_at_min']:.1f}" if r["gflops_at_min"] else ""
        busy = f"{r['busy']:.0%}" if args.threads > 1 and r["busy"] is not None else ""
        print(f"| {r['dispatch']} | {r['calls']:g} | {r['ms_per_inference']:.3f} | "
              f"{r['ms_per_inference'] / wall:.1%} | {r['min_ms']:.3f} | {gflops} | "
              f"{'x'.join(map(str, r['workgroups'] or []))} | {busy} |")
    report = {"wall_ms": wall, "dispatches": rows}
    if not args.no_onnxruntime:
        import numpy as np
        m = bundle.manifest
        inputs = [np.load(bundle.file(p)) for p in m.golden_inputs]
        model, names = onnx_model(args.recipe, inputs)
        ort_wall, ort_rows = ort_profile(model, names, inputs, args.iterations, work,
                                         args.threads)
        classes, shapes = compare(rows, ort_rows)
        print_comparison(wall, ort_wall, classes, shapes, args.top, args.threads)
        report.update(onnxruntime_wall_ms=ort_wall, onnxruntime_nodes=ort_rows,
                      op_classes=classes, shapes=shapes)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
