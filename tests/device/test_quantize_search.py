"""`edgekit quantize search --host`: the candidates of the digits classifier whose middle layer
int8 cannot carry (tests/fixtures/digits_mixed.py) built for the target and measured on the
x86_64 lab device over SSH — each validated there as a trial release, scored on its labelled
set with the device's runtime and timed with its iree-benchmark-module — then removed: the
device keeps no release of the search and nothing was activated."""

import json

from tests.fixtures import digits_mixed
from tests.fixtures.cli import edgekit_here

SAMPLES = 64      # of the recipe's 200: one batch of the device's dataset runs per candidate


def test_the_search_scores_and_times_its_candidates_on_the_device(x86_device, tmp_path):
    recipe = digits_mixed.write_recipe(tmp_path)
    recipe.write_text(recipe.read_text().replace("limit: 200", f"limit: {SAMPLES}"))
    # at most one layer float: int8 and int8 + fc2 (whose choice no timing noise can change);
    # no fp32 build (its timing on a device is `bench`'s, tests/device/test_bench.py)
    proc = edgekit_here("quantize", "search", "--recipe", recipe, "--target", "host",
                        "--host", x86_device.name, "--max-float", "1", "--no-fp32",
                        "--rounds", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    found = json.loads(proc.stdout)
    print(found["seconds"], {c["name"]: (c["score"], c["p50_ms"]) for c in found["candidates"]})
    assert found["target"] == "host" and found["refused"] == []
    assert found["measured_on"].startswith(f"{x86_device.name} (")     # its SSH address
    assert x86_device.address in found["measured_on"]
    by_name = {c["name"]: c for c in found["candidates"]}
    assert list(by_name) == ["int8", "int8 + 1 float"]
    assert all(c["p50_ms"] > 0 for c in by_name.values()), by_name      # timed there
    # scored there: all-int8 loses most of its accuracy, keeping fc2 float restores it
    assert by_name["int8"]["drop"] > 0.3 and not by_name["int8"]["meets"]
    assert found["chosen"]["float_layers"] == ["fc2"] and found["chosen"]["drop"] <= 0.02
    apps = x86_device.host_path(f"{x86_device.home}/.edgekit/apps/digits-mixed")
    left = [p.name for p in (apps / "releases").iterdir()] if (apps / "releases").is_dir() \
        else []
    assert left == [] and not (apps / "current").is_symlink(), left
    journal = apps / "journal.jsonl"
    events = [json.loads(line)["event"] for line in journal.read_text().splitlines()] \
        if journal.is_file() else []
    assert "activate" not in events and "scored" not in events, events
