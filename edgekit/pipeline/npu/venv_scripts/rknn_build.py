"""Runs INSIDE the rknn venv (rknn-toolkit2, proprietary; numpy 1.26): never imports edgekit.

    python rknn_build.py request.json

request.json: {"onnx": path, "platform": "rk3588", "quantize": bool, "dataset": path | null,
               "rknn": path to write, "samples": npz path, "sample_count": n, "input_count": k,
               "outputs": npz path to write, "report": json path to write}
The npz of samples holds `s<k>_i<i>` (sample k, input i, in the model's own layout: NCHW for
images); the outputs npz gets `s<k>_o<j>`, the simulator's outputs (dequantized to float32).
The compiler's layer table (ops, NPU/CPU placement, cycle estimates) goes to stdout, where
edgekit reads it. Exit 3 names the rknn call that failed.
"""

import json
import os
import sys


def main(request_path: str) -> int:
    with open(request_path) as f:
        req = json.load(f)
    # rknn-toolkit2 writes its intermediate models (check*.onnx) to the working directory
    os.chdir(os.path.dirname(os.path.abspath(request_path)))
    import numpy as np
    from rknn.api import RKNN

    rknn = RKNN(verbose=True)       # verbose: the compiler prints its layer table

    def check(code, call: str) -> None:
        if code != 0:
            sys.stderr.write(f"edgekit: rknn-toolkit2 {call} failed (returned {code})\n")
            sys.exit(3)

    # mean 0 / std 1: the model gets the same float input as the golden run
    check(rknn.config(target_platform=req["platform"]), "config")
    check(rknn.load_onnx(model=req["onnx"]), "load_onnx")
    check(rknn.build(do_quantization=req["quantize"], dataset=req.get("dataset")), "build")
    check(rknn.export_rknn(req["rknn"]), "export_rknn")
    check(rknn.init_runtime(), "init_runtime (simulator)")   # no target: the simulator
    samples = np.load(req["samples"])
    results = {}
    for k in range(req["sample_count"]):
        inputs = [samples[f"s{k}_i{i}"] for i in range(req["input_count"])]
        # the model's own layout (rknn applies data_format to 4-D inputs only)
        outputs = rknn.inference(inputs=inputs, data_format=["nchw"] * len(inputs))
        if outputs is None:
            check(-1, f"inference on sample {k}")
        for j, out in enumerate(outputs):
            results[f"s{k}_o{j}"] = np.asarray(out, dtype=np.float32)
    np.savez(req["outputs"], **results)
    rknn.release()
    with open(req["report"], "w") as f:
        json.dump({"simulated_samples": req["sample_count"]}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
