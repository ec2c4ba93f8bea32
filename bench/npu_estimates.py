#!/usr/bin/env python3
"""NPU estimates next to a measurement: per example model and Ethos-U accelerator, Vela's
static estimate (cycles, inferences/s at the profile's clock) and the share of MACs on the
NPU, beside the *measured* latency of the CPU fallback on this machine (the IREE module of the
same integer model, compiled for the host, 1 thread, local-sync).

    python bench/npu_estimates.py                          # small_cnn transformer_block kws_mlp
    python bench/npu_estimates.py --models small_cnn --rounds 50 --json out.json

Accelerators: ethos-u55-128 and ethos-u85-256 (their profiles: backend none), and the
i.MX 93's ethos-u65-256 through a host variant of imx93-npu (its `npu:` section on this
machine's CPU), which is also where the CPU fallback module comes from. Estimates are Vela's,
never measured: no NPU is attached here. Needs `edgekit toolchains install npu`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgekit import BuildOptions, build  # noqa: E402
from edgekit.config.profiles import load_target  # noqa: E402
from edgekit.errors import EdgekitError  # noqa: E402

EXAMPLES = "edgekit.examples.models"
# model → (recipe in recipes/ or None, calibration: the factory's own or None: random like the
# example input)
MODELS = {"small_cnn": "small_cnn_int8.yaml", "transformer_block": "transformer_block_int8.yaml",
          "kws_mlp": None, "mobilenet_v2_like": None}
DEFAULT = ("small_cnn", "transformer_block", "kws_mlp")
ACCELERATORS = ("ethos-u55-128", "ethos-u65-256 (imx93-npu)", "ethos-u85-256")

CALIBRATION = '''
import torch
from {examples} import {model} as factory

def calibration():
    _, example = factory()
    generator = torch.Generator().manual_seed(1)
    for _ in range(16):
        yield tuple(torch.randn(*t.shape, generator=generator) for t in example)
'''


def recipe_for(model: str, folder: Path) -> Path:
    if MODELS[model]:
        return ROOT / "recipes" / MODELS[model]
    (folder / f"calib_{model}.py").write_text(CALIBRATION.format(examples=EXAMPLES, model=model))
    path = folder / f"{model}.yaml"
    path.write_text(yaml.safe_dump({
        "name": model.replace("_", "-"), "model": {"python": f"{EXAMPLES}:{model}"},
        "quantize": {"mode": "int8", "calibration": f"{folder}/calib_{model}.py:calibration"}}))
    return path


def host_u65_profile(folder: Path) -> Path:
    """imx93-npu's NPU on this machine's CPU: the CPU fallback module runs here."""
    npu = load_target("imx93-npu").npu.model_dump(mode="json", exclude_none=True)
    path = folder / "host-ethos-u65.yaml"
    path.write_text(yaml.safe_dump({"description": "host CPU + imx93-npu's Ethos-U65-256",
                                    "extends": "host", "npu": npu}))
    return path


def median_ms(vmfb: Path, inputs: list[np.ndarray], rounds: int) -> float:
    import iree.runtime as rt
    config = rt.Config("local-sync")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb.read_bytes()))
    main = ctx.modules.module["main"]
    args = [rt.asdevicearray(config.device, x) for x in inputs]
    for _ in range(3):
        main(*args)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        out = main(*args)
        (out[0] if isinstance(out, (list, tuple)) else out).to_host()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def row_for(model: str, accelerator: str, bundle, cpu_ms: float | None) -> dict:
    npu = bundle.manifest.npu
    e = npu.estimate
    on_npu = sum(1 for o in npu.ops if o.placement == "npu")
    on_cpu = sum(1 for o in npu.ops if o.placement == "cpu" and not o.reason.startswith("boundary"))
    return {"model": model, "accelerator": accelerator,
            "npu_mac_share": npu.npu_mac_share, "ops_npu": on_npu, "ops_cpu": on_cpu,
            "estimate_cycles": e.cycles, "estimate_inferences_per_s": e.inferences_per_s,
            "estimate_ms": e.cycles / e.clock_hz * 1e3 if e.cycles and e.clock_hz else None,
            "estimate_source": e.source, "worst_lsb": npu.worst_lsb,
            "measured_cpu_fallback_ms": cpu_ms}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT), choices=list(MODELS))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgekit-npu-bench-") as tmp:
        folder = Path(tmp)
        u65 = host_u65_profile(folder)
        for model in args.models:
            recipe = recipe_for(model, folder)
            try:
                host = build(BuildOptions(recipe=recipe, target=str(u65),
                                          out=folder / f"{model}-u65")).bundle
            except EdgekitError as exc:   # e.g. the reference model > 1 LSB from PyTorch
                rows.append({"model": model, "accelerator": "any", "refused": exc.what,
                             "measured_cpu_fallback_ms": None})
                print(json.dumps(rows[-1]), file=sys.stderr)
                continue
            inputs = [np.load(host.file(f)) for f in host.manifest.golden_inputs]
            cpu_ms = median_ms(host.module, inputs, args.rounds)
            for accelerator in ACCELERATORS:
                if accelerator.startswith("ethos-u65"):
                    bundle = host
                else:
                    try:
                        bundle = build(BuildOptions(recipe=recipe, target=accelerator,
                                                    out=folder / f"{model}-{accelerator}")).bundle
                    except EdgekitError as exc:   # e.g. an op stranded without a CPU
                        rows.append({"model": model, "accelerator": accelerator,
                                     "refused": exc.what, "measured_cpu_fallback_ms": cpu_ms})
                        print(json.dumps(rows[-1]), file=sys.stderr)
                        continue
                rows.append(row_for(model, accelerator, bundle, cpu_ms))
                print(json.dumps(rows[-1]), file=sys.stderr)
    print(f"{'model':18} {'accelerator':26} {'MACs on NPU':>11} {'ops NPU/CPU':>11} "
          f"{'est. cycles':>11} {'est. inf/s':>10} {'est. ms':>8} {'CPU fallback ms':>15}")
    for r in rows:
        if "refused" in r:
            print(f"{r['model']:18} {r['accelerator']:26} refused: {r['refused']}")
            continue
        share = f"{r['npu_mac_share'] * 100:.1f}%" if r["npu_mac_share"] is not None else "-"
        print(f"{r['model']:18} {r['accelerator']:26} {share:>11} "
              f"{r['ops_npu']:>5}/{r['ops_cpu']:<5} {r['estimate_cycles']:>11,} "
              f"{r['estimate_inferences_per_s']:>10,.0f} {r['estimate_ms']:>8.3f} "
              f"{r['measured_cpu_fallback_ms']:>15.3f}")
    print("est.: Vela 5.2.0's static estimate at the profile's clock (not measured); CPU "
          "fallback: measured here, IREE host module of the same integer model, 1 thread; "
          f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
