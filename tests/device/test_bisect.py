"""`edgekit bisect --host`: the tapped variants run on the lab device through the trial
machinery (uploaded, validated, never activated, removed afterwards)."""

import json

from tests.device.test_deploy import current_of, releases_on
from tests.integration.helpers import edgekit


def test_bisect_on_the_device_names_the_op_its_gpu_computes_wrongly(write_recipe, x86_device,
                                                                    tmp_path):
    (tmp_path / "mali-unchecked.yaml").write_text(
        "extends: vulkan-generic\nvulkan:\n  target: valhall\n")
    recipe = write_recipe('name: mali-remote\nmodel:\n  python: "@TINY@:conv_mean"\n')
    proc = edgekit("bisect", "--recipe", str(recipe), "--target",
                   str(tmp_path / "mali-unchecked.yaml"), "--host", x86_device.name,
                   "--out", str(tmp_path / "repro"), "--json")
    assert proc.returncode == 8, proc.stderr
    result = json.loads(proc.stdout)
    assert result["where"].startswith(x86_device.name)
    assert result["first"]["op"] == "aten.mean.dim" and result["reproducer"]["reproduced"]
    # nothing stayed on the device: no release of the app or of its bisect variants
    assert current_of(x86_device, "mali-remote") is None
    assert releases_on(x86_device, "mali-remote-bisect") == set()
    # (run first above: a trial on a device that never had a deploy installs the signers)
    failed = edgekit("deploy", "--recipe", str(recipe), "--target",
                     str(tmp_path / "mali-unchecked.yaml"), "--host", x86_device.name)
    assert failed.returncode == 8
    assert "edgekit bisect --recipe" in failed.stderr    # deploy offers the next step
