import os
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_models.py"
# The arm64 rootfs is built once per machine (a few minutes) and shared by every run.
# The CLI prints a progress line per step when stderr is piped; tests read stderr for the one-line
# errors, so the commands they run stay quiet (the lines themselves: tests/unit/test_cli_truth.py)
os.environ.setdefault("EDGEKIT_PROGRESS", "none")
os.environ.setdefault("EDGEKIT_ROOTFS_DIR",
                      str(Path.home() / ".cache" / "edgekit" / "lab" / "rootfs-arm64-bookworm"))


# Test tiers, by folder: `pytest -m unit` (pure logic and shims, under a minute), `local`
# (device code on the local transport, real shims, seconds), `integration` (real torch-mlir and
# IREE on tiny models), `device` (real sshd lab devices, arm64 under qemu), `faults` (faults
# injected for real into deploys to lab devices), `corpus` (real architectures — transformers'
# BERT, DistilBERT, GPT-2 and in-tree CNNs/ViT — built for host and rpi4, compared with eager),
# `onnx_suite` (every 12th case of the ONNX backend node suite through edgekit for host, against
# a ratchet of cases that passed).
TIERS = {"unit": "unit", "shims": "unit", "local": "local", "integration": "integration",
         "device": "device", "lab": "device", "faults": "faults", "corpus": "corpus",
         "onnx_suite": "onnx_suite", "npu": "npu"}


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0]
        if folder in TIERS:
            item.add_marker(TIERS[folder])


@pytest.fixture(scope="session", autouse=True)
def isolated_edgekit_state(tmp_path_factory):
    """The whole session uses its own build cache, pinned keys and device registry, never the
    user's; a build made by one test is a cache hit for the next."""
    saved = {k: os.environ.get(k) for k in ("EDGEKIT_CACHE_DIR", "EDGEKIT_HOME",
                                             "EDGEKIT_TOOLCHAINS_DIR")}
    # the optional toolchains' venvs (NPU compilers, made by .ci/setup.sh) stay where they are
    from edgekit.toolchain.venvs import toolchains_root
    os.environ["EDGEKIT_TOOLCHAINS_DIR"] = str(toolchains_root())
    os.environ["EDGEKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("edgekit-cache"))
    os.environ["EDGEKIT_HOME"] = str(tmp_path_factory.mktemp("edgekit-home"))
    os.environ.pop("EDGEKIT_TARGETS_PATH", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(autouse=True)
def in_tmp_dir(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def write_recipe(tmp_path):
    """Write a recipe YAML (dedented) into the test's directory and return its path."""
    def write(text: str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip().replace("@TINY@", str(TINY)))
        return path
    return write
