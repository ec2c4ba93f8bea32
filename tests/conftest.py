import os
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_models.py"
# The arm64 rootfs is built once per machine (a few minutes) and shared by every run.
# The CLI prints a progress line per step when stderr is piped; tests read stderr for the
# one-line errors, so the commands they run stay quiet (the lines themselves:
# tests/unit/test_render_decisions.py)
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
OWN_TIERS = set(TIERS.values()) | {"scale"}


# Parallel workers (pytest-xdist; pyproject's addopts: `-n auto --dist loadgroup`). Tests
# that share something run on one worker, in order: the lab tiers share the lab devices
# (addresses on 127.0.0.x, one lab per machine); a file of compiler tests shares the builds
# its tests make (cache hits); the corpus shares its models; the local fleet tests keep their
# latency gates off the CPUs that the rollout under load burns; a file whose tests share a
# module-scoped fixture (a built bundle) builds it once. The rest go one by one.
SHARED = {"device": "lab", "faults": "lab", "lab": "lab", "corpus": "corpus"}
BY_FILE = ("integration", "npu", "onnx_suite")
# the local fleet tests: latency gates, and a rollout under CPU load (burners)
LATENCY_GATED = {("local", "test_fleet.py"), ("local", "test_fleet_at_scale.py")}
MOST_WORKERS = 8       # each worker imports torch (~1 GB with a build in flight)


def xdist_group(folder: str, item: pytest.Item) -> str | None:
    if folder in SHARED:
        return SHARED[folder]
    fixtures = getattr(item, "_fixtureinfo", None)
    shares_a_module_fixture = fixtures is not None and any(
        d.scope in ("module", "class", "package")
        for defs in fixtures.name2fixturedefs.values() for d in defs)
    if (folder, item.path.name) in LATENCY_GATED:
        return "local/fleet"      # the gates' measurements never beside the burners
    if folder in BY_FILE or shares_a_module_fixture:
        return f"{folder}/{item.path.stem}"
    return None


# folders whose files may name a tier of their own (tests/local: a fault, scale or
# integration test beside the local fixtures it uses)
MIXED_FOLDERS = {"local"}


def pytest_ignore_collect(collection_path, config):
    """`-m TIER` collects only the folders that can hold that tier: importing every tier's
    modules (torch, onnx, the corpus) costs each worker seconds the tier itself does not."""
    wanted = config.getoption("markexpr", "")
    if wanted not in OWN_TIERS:
        return None
    tests = Path(__file__).parent
    if collection_path.parent != tests or not collection_path.is_dir():
        return None
    folder = collection_path.name
    if folder in TIERS and TIERS[folder] != wanted and folder not in MIXED_FOLDERS:
        return True
    return None


@pytest.hookimpl(tryfirst=True)    # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent
    for item in items:
        folder = item.path.relative_to(tests).parts[0]
        # a file may name its own tier (a fault or scale test beside the local fixtures
        # it uses); otherwise its folder's
        if folder in TIERS and not any(item.get_closest_marker(t) for t in OWN_TIERS):
            item.add_marker(TIERS[folder])
        group = xdist_group(folder, item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per CPU (at most MOST_WORKERS), or PYTEST_XDIST_AUTO_NUM_WORKERS;
    none (this process) when the command line names test files or tests: starting workers
    costs more than a file's tests. `-n 0` runs everything in this process."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if config.args and all(".py" in arg for arg in config.args):
        return 0
    return max(1, min(len(os.sched_getaffinity(0)), MOST_WORKERS))


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


@pytest.fixture()
def int8_recipe(tmp_path, write_recipe):
    """An int8 recipe for a model defined by Python source: `make(name, source, factory,
    shape)` writes `<factory>.py` and four random calibration inputs of `shape` beside it."""
    def make(name: str, source: str, factory: str, shape: tuple[int, ...]) -> Path:
        import numpy as np
        (tmp_path / f"{factory}.py").write_text(source)
        rng = np.random.default_rng(3)
        np.savez(tmp_path / "calib.npz",
                 x=rng.standard_normal((4, *shape)).astype(np.float32))
        return write_recipe(f"name: {name}\n"
                            f"model: {{python: {factory}.py:{factory}}}\n"
                            f"inputs: [{{name: x, shape: {list(shape)}}}]\n"
                            "quantize: {mode: int8, calibration: calib.npz}\n")
    return make
