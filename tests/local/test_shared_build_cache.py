"""A build cache shared by several $EDGEKIT_HOMEs (two users, a fresh home beside an old
one): another home's entry is signed by a key this home does not trust, so it is neither used
nor re-signed; this home builds its own once, and deploys it."""

import shutil

import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.config.paths import cache_root
from edgekit.device.deploy import deploy_bundle
from edgekit.toolchain.signing import verify_bundle
from tests.local.conftest import RECIPE, current_of

pytestmark = pytest.mark.local


def test_a_fresh_home_with_a_shared_cache_builds_its_own_signed_bundle_and_deploys_it(
        builds, make_device, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    shutil.copytree(cache_root(), cache, symlinks=True)     # holds the session home's build
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(cache))
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path / "fresh-home"))
    monkeypatch.delenv("EDGEKIT_SIGNING_KEY", raising=False)
    before = sorted(p.name for p in (cache / "builds").iterdir())
    first = build(BuildOptions(recipe=RECIPE, target="host", out=tmp_path / "a"))
    assert not first.cached                   # the other home's entry was not taken
    assert verify_bundle(first.bundle.path)   # signed by this home's key
    assert set(before) <= {p.name for p in (cache / "builds").iterdir()}   # theirs kept
    again = build(BuildOptions(recipe=RECIPE, target="host", out=tmp_path / "b"))
    assert again.cached and again.bundle.manifest.files == first.bundle.manifest.files
    device = make_device()
    result = deploy_bundle(device, again.bundle)
    assert current_of(device.root) == result.release
