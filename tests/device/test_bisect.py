"""`edgekit bisect --host`: the tapped variants run on the lab device through the trial
machinery (uploaded, validated, never activated, removed afterwards)."""

import json
from pathlib import Path

from tests.device.test_deploy import current_of, releases_on
from tests.integration.helpers import edgekit

REPO = Path(__file__).resolve().parents[2]


def test_bisect_on_the_device_names_the_op_its_gpu_computes_wrongly(x86_device, tmp_path):
    # README's example, with the repository's own files (recipes/, targets/)
    recipe = REPO / "recipes" / "conv_mean.yaml"
    proc = edgekit("bisect", "--recipe", str(recipe), "--target", "mali-unchecked",
                   "--host", x86_device.name, "--out", str(tmp_path / "repro"), "--json")
    assert proc.returncode == 8, proc.stderr
    result = json.loads(proc.stdout)
    assert result["where"].startswith(x86_device.name)
    assert result["first"]["op"] == "aten.mean.dim" and result["reproducer"]["reproduced"]
    # nothing stayed on the device: no release of the app or of its bisect variants
    assert current_of(x86_device, "conv-mean") is None
    assert releases_on(x86_device, "conv-mean-bisect") == set()
    # (run first above: a trial on a device that never had a deploy installs the signers)
    failed = edgekit("deploy", "--recipe", str(recipe), "--target", "mali-unchecked",
                     "--host", x86_device.name)
    assert failed.returncode == 8
    assert "edgekit bisect --recipe" in failed.stderr    # deploy offers the next step
