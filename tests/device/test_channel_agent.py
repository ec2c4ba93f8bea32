"""Issue 35's pull path on lab devices: one channel, served by a real nginx on 127.0.0.20,
updates two x86_64 devices and an aarch64 one (qemu) through the POSIX-shell agent (its poll
run directly rather than by the timer). During the rollout one x86_64 device is offline and
catches up afterwards, and the first staged step pauses the channel on its own: the release
for x86_64 fails validation on the device in it, which rolls back and reports."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.api.channel import install_agent, poll_agent
from edgekit.channel.index import bucket
from edgekit.channel.publish import promote, publish
from edgekit.device.deploy import release_id
from edgekit.lab import devices as lab
from edgekit.lab.nginx import Nginx
from edgekit.models.bundle import load_bundle
from tests.local.conftest import rehash

pytestmark = pytest.mark.device

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kws_mlp.yaml"


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("channel-bundles")
    v2_recipe = folder / "kws_mlp_v2.yaml"
    v2_recipe.write_text(RECIPE.read_text().replace("seed: 0", "seed: 1"))
    built = {f"{v}-{arch}": build(BuildOptions(recipe=recipe, target=target,
                                               out=folder / f"{v}-{arch}")).bundle.path
             for v, recipe in (("v1", RECIPE), ("v2", v2_recipe))
             for arch, target in (("x86_64", "host"), ("aarch64", "rpi4"))}
    bad = folder / "v2-x86_64-bad"     # validates wrong on any device: its golden is off
    shutil.copytree(built["v2-x86_64"], bad)
    golden = bad / "golden" / "output_0.npy"
    np.save(golden, np.load(golden) * 2.0 + 1.0)
    rehash(bad, "golden/output_0.npy")
    built["v2-x86_64-bad"] = bad
    return built


@pytest.fixture(scope="module")
def second_x86(lab_devices):
    device = lab.up("x86_64", 1)[0]
    yield device
    lab.down([device.name])


def current(device):
    link = device.host_path(f"{device.home}/.edgekit/apps/kws-mlp/current")
    return link.readlink().name if link.is_symlink() else None


def test_a_channel_updates_a_mixed_fleet_with_an_offline_device_and_a_paused_step(
        x86_device, arm_device, second_x86, bundles, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    channel = site / "stable"
    rel = {k: release_id(load_bundle(p)) for k, p in bundles.items()}
    devices = {"x86_64": [x86_device, second_x86], "aarch64": [arm_device]}
    everyone = [x86_device, second_x86, arm_device]
    with Nginx(site, tmp_path / "nginx") as web:
        url = f"{web.url}/stable"

        def report(device):
            return json.loads((channel / "status" / f"{device.name}.json").read_text())

        def poll(device):
            code, err = poll_agent(device.name)
            return code, err, report(device)["state"]

        # v1 for both arches at 100 %: every device installs its arch's release
        publish(bundles["v1-x86_64"], channel)
        publish(bundles["v1-aarch64"], channel)
        for device in everyone:
            install_agent(device.name, url, device.name, timer="none")
            code, err, state = poll(device)
            assert code == 0 and state == "updated", err
        for arch, group in devices.items():
            assert all(current(d) == rel[f"v1-{arch}"] for d in group)

        # the second x86_64 device goes offline for the whole rollout of v2
        conf = second_x86.host_path(f"{second_x86.home}/.edgekit/agent/config")
        online = conf.read_text()
        conf.write_text(online.replace(web.url, "http://127.0.0.21:9"))

        # v2: a first step of 50 % holding the first x86_64 device and the aarch64 one; the
        # x86_64 release fails validation there
        def bucket_of(device, key):
            return bucket(seed, device.name, rel[key]) // 100
        seed = next(s for s in (f"{i:016x}" for i in range(100000))
                    if all(bucket(s, d.name, rel[k]) // 100 < 50 for d, k in
                           ((x86_device, "v2-x86_64-bad"), (arm_device, "v2-aarch64"))))
        publish(bundles["v2-aarch64"], channel, steps=(50, 100), max_fail="0", seed=seed)
        publish(bundles["v2-x86_64-bad"], channel, steps=(50, 100), max_fail="0", seed=seed)
        assert bucket_of(x86_device, "v2-x86_64-bad") < 50
        code, err, state = poll(x86_device)
        assert code == 1 and state == "failed" and "max abs error" in err
        assert current(x86_device) == rel["v1-x86_64"]          # rolled back: as it was
        code, err, state = poll(arm_device)
        assert code == 0 and state == "updated", err
        assert current(arm_device) == rel["v2-aarch64"]
        code, err = poll_agent(second_x86.name)
        assert code == 1 and "cannot be reached" in err
        # the controller reads the reports: the staged step pauses itself
        change = promote(channel)
        assert change.action == "paused" and change.index.percent == 50
        assert poll(arm_device)[2] == "current"

        # a fixed x86_64 release, promoted to 100 %
        publish(bundles["v2-x86_64"], channel, steps=(50, 100), max_fail="0", seed=seed)
        assert promote(channel).action == "raised"
        for device in (x86_device, arm_device):
            code, err, state = poll(device)
            assert code == 0 and state in ("updated", "current"), err
        # back online: it catches up on its next poll
        conf.write_text(online)
        code, err, state = poll(second_x86)
        assert code == 0 and state == "updated", err
        for arch, group in devices.items():
            assert all(current(d) == rel[f"v2-{arch}"] for d in group)
        assert promote(channel).action == "complete"
