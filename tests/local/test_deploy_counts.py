"""A cold `deploy --recipe` copies the bundle once, parses its manifest once and verifies its
sha256s and signature once (issue 39: they were copied twice, parsed three times and verified
twice each, at every hop of build → deploy)."""

import shutil

import pytest

import edgekit.models.bundle as bundle_module
import edgekit.toolchain.signing as signing
from edgekit.api.build import BuildOptions, build
from edgekit.api.deploy import DeployOptions, deploy
from tests.local.conftest import RECIPE, current_of

pytestmark = pytest.mark.local


@pytest.fixture
def counted(monkeypatch):
    """Spies on the low-level steps (each still runs): copies of a bundle directory, manifest
    parses, sha256 checks of a bundle's files and signature verifications (ssh-keygen -Y
    verify runs)."""
    counts = {"copies": 0, "parses": 0, "sha256 checks": 0, "signature checks": 0}

    def spy(owner, name, key, when=lambda *a, **k: True):
        real = getattr(owner, name)

        def counting(*args, **kwargs):
            if when(*args, **kwargs):
                counts[key] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, counting)

    spy(shutil, "copytree", "copies",
        when=lambda src, *a, **k: (bundle_module.Path(src) / bundle_module.MANIFEST).is_file())
    spy(bundle_module.Manifest, "model_validate", "parses")
    spy(bundle_module.Bundle, "verify", "sha256 checks")
    spy(signing, "run_tool", "signature checks", when=lambda argv, **k: "verify" in argv)
    return counts


ONCE = {"copies": 1, "parses": 1, "sha256 checks": 1, "signature checks": 1}


def test_a_cold_deploy_of_a_recipe_copies_parses_and_verifies_the_bundle_once(
        tmp_path, monkeypatch, counted):
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(tmp_path / "cold-cache"))
    device = tmp_path / "dev"
    device.mkdir()
    result = deploy(DeployOptions(host=f"local:{device}", recipe=RECIPE, target="host"))
    assert result.activated and current_of(device) == result.release
    assert counted == ONCE      # before: 2 copies, 3 parses, 2 sha256 and 2 signature checks
    # a cached build (found from the model's sources), and a prebuilt bundle: the same
    built = build(BuildOptions(recipe=RECIPE, target="host", out=tmp_path / "built")).bundle
    for options in (DeployOptions(host=f"local:{device}", recipe=RECIPE, target="host"),
                    DeployOptions(host=f"local:{device}", bundle=built.path)):
        counted.update(dict.fromkeys(counted, 0))
        assert deploy(options).report.ok
        assert counted == ONCE
