"""`edgekit targets derive` on the emulated Pi: the profile names the emulated CPU's features
(AT_HWCAP), not the host's, and builds, deploys and validates there like an in-tree one."""

import json

import yaml

from edgekit.device.probe import probe
from edgekit.transport import open_device
from tests.integration.helpers import edgekit

TINY_RECIPE = 'name: {name}\nmodel:\n  python: "@TINY@:{factory}"\n'


def test_a_derived_profile_matches_the_emulated_cpu_and_validates_there(arm_device,
                                                                        write_recipe, tmp_path):
    out = tmp_path / "targets" / "emulated-pi.yaml"
    proc = edgekit("targets", "derive", arm_device.name, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    with open_device(arm_device.name, None) as conn:
        info = probe(conn)
    data = yaml.safe_load(out.read_text())
    assert data["extends"] == "aarch64-generic" and data["cpu"]["cpu"] == "generic"
    features = data["cpu"]["features"].split(",")
    assert "+neon" in features
    for feature in ("dotprod", "i8mm", "fullfp16"):   # as the emulated CPU reports them
        assert (f"+{feature}" in features) == info.has_cpu_feature(feature)
    assert "AT_HWCAP" in out.read_text()
    recipe = write_recipe(TINY_RECIPE.format(name="derived-pi", factory="linear_softmax"))
    deployed = edgekit("deploy", "--target", str(out), "--recipe", str(recipe), "--host",
                       arm_device.name, "--json")
    assert deployed.returncode == 0, deployed.stderr
    assert json.loads(deployed.stdout)["report"]["ok"]
