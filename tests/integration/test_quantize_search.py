"""Mixed precision chosen by measured error, with real torch-mlir and IREE: a digits classifier
whose middle layer int8 cannot carry (outlier activations, tests/fixtures/digits_mixed.py).
All-int8 loses most of its accuracy and fails max_drop; the build's search ranks that layer
worst by bisect's per-layer error, keeps it float, meets max_drop, and records why; the
quantization report shows it, and its HTML plots render in headless Chromium."""

import json
import subprocess

from tests.fixtures import digits_mixed
from tests.fixtures.cli import edgekit_here


def test_a_max_drop_build_keeps_the_miscalibrated_layer_float_and_meets_the_drop(tmp_path):
    recipe = digits_mixed.write_recipe(tmp_path)
    out = tmp_path / "bundle"
    proc = edgekit_here("build", "--recipe", recipe, "--target", "host", "--out", out,
                        "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    note = manifest["quantization"]
    search = note["search"]
    # ranked by the error each layer adds: fc2, fed the outliers, first
    assert [e["layer"] for e in search["layers"]][0] == "fc2"
    assert [e["layer"] for e in note["float_layers"]] == ["fc2"]
    kept = note["float_layers"][0]
    assert kept["cosine"] < 0.5 and kept["added"] > 0.5, kept          # why it stayed float
    int8, chosen = search["candidates"]
    assert int8["float_layers"] == 0 and int8["drop"] > 0.3            # all-int8 fails
    assert chosen["float_layers"] == 1 and chosen["drop"] <= 0.02      # the choice meets it
    assert search["reference_score"] > 0.85
    assert note["contractions"]["integer"] == 2 and note["contractions"]["f32"] == 1

    html = tmp_path / "quantize.html"
    proc = edgekit_here("quantize", "report", out, "--html", html, "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    report = json.loads(proc.stdout)
    scores = {r["precision"]: r for r in report["scores"]}
    own = scores["this build (int8, 1 float)"]
    assert own["drop"] <= 0.02 and scores["int8"]["drop"] > 0.3, scores
    assert own["score"] == chosen["score"]     # measured again here: the same module
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(["chromium", *flags, "--virtual-time-budget=3000", "--dump-dom",
                          html.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-plots-expected="2"' in dom and 'data-plots-rendered="2"' in dom, dom[-2000:]
    assert "kept float" in dom


def test_keep_float_naming_no_module_of_the_model_is_one_line(tmp_path):
    recipe = digits_mixed.write_recipe(tmp_path)
    recipe.write_text(recipe.read_text().replace("max_drop: 0.02}\n",
                                                 "keep_float: [fc9]}\n"))
    proc = edgekit_here("build", "--recipe", recipe, "--target", "host", "--out",
                        tmp_path / "b", cwd=tmp_path)
    assert proc.returncode == 18, proc.stderr
    assert "quantize.keep_float names 'fc9', not a module of the model" in proc.stderr
    assert "fc1, fc2, fc3" in proc.stderr
