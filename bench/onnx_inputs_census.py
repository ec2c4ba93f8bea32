"""How far ONNX backend node cases get through edgekit's load and reference stages (no
compile): loaded with golden outputs from onnxruntime, from the onnx reference evaluator, or
refused (by reason). Seconds for the whole suite; the compile and validation of the same cases
is bench/onnx_backend_suite.py's.

    python3 bench/onnx_inputs_census.py [--every N] [--random]

`--random`: the samples edgekit draws itself (no `samples:`); default: each case's own inputs
given as `samples:`.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="every N-th case")
    parser.add_argument("--random", action="store_true", help="edgekit's own random samples")
    args = parser.parse_args()
    from onnx.backend.test.case.node import collect_testcases

    from edgekit.config.recipe import load_recipe
    from edgekit.errors import EdgekitError
    from edgekit.pipeline.frontends.onnx import OnnxFrontend
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = sorted(collect_testcases(), key=lambda c: c.name)[::args.every]
        frontend, outcomes, reasons = OnnxFrontend(), collections.Counter(), collections.Counter()
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="onnx-census-") as tmp:
            for case in cases:
                folder = Path(tmp) / case.name
                folder.mkdir()
                onnx.save(case.model, str(folder / "model.onnx"))
                text = "name: case\nmodel: {onnx: model.onnx}\n"
                if not args.random and case.data_sets:
                    inits = {t.name for t in case.model.graph.initializer}
                    names = [v.name for v in case.model.graph.input if v.name not in inits]
                    arrays = [_array(a) for a in case.data_sets[0][0]]
                    if all(a is not None and a.dtype != object for a in arrays):
                        np.savez(folder / "s.npz", **dict(zip(names, arrays)))
                        text += "samples: s.npz\n"
                (folder / "r.yaml").write_text(text)
                try:
                    recipe = load_recipe(folder / "r.yaml")
                    exported = frontend.export(recipe, frontend.load(recipe))
                    outcomes["reference: " + exported.reference.split(" (")[0]
                             .split(" for ")[0]] += 1
                except EdgekitError as exc:
                    outcomes["refused"] += 1
                    reasons[exc.what.split(":")[0][:70]] += 1
                except Exception as exc:  # what this census exists to find
                    outcomes["crash"] += 1
                    reasons[f"crash: {type(exc).__name__}: {str(exc)[:60]}"] += 1
    print(f"{len(cases)} cases in {time.perf_counter() - started:.0f} s: {dict(outcomes)}")
    for reason, count in reasons.most_common(25):
        print(f"{count:5d}  {reason}")


def _array(value) -> np.ndarray | None:
    """A case input as an array; None for sequences and optionals (no .npz form)."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    try:
        return np.asarray(value)
    except ValueError:
        return None


if __name__ == "__main__":
    main()
