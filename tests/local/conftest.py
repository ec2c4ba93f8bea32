"""Devices that are directories on this machine (LocalTransport): the real shims, the real
IREE runtime tools and a real bundle, without SSH — deploy and fleet logic in seconds.

Bundles are built once per session (two seeds of the keyword-spotting recipe: two releases
of one app), and copies are edited per test for the releases that must fail."""

import json
import shutil
from pathlib import Path

import pytest

from edgekit.api.build import BuildOptions, build
from edgekit.models.bundle import MANIFEST, Bundle, load_bundle, sha256_file
from edgekit.toolchain.signing import sign_bundle
from edgekit.transport.local import LocalTransport

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "kws_mlp.yaml"
APP = "kws-mlp"


@pytest.fixture(scope="session")
def recipes(tmp_path_factory) -> dict[str, Path]:
    """v1's recipe, and v2's (same recipe, other seed: other weights, another release of the
    app). A test that builds or deploys them by recipe gets the session's builds from the
    cache (a copy of v2's recipe elsewhere is another source key: loaded and exported again)."""
    v2_recipe = tmp_path_factory.mktemp("local-recipes") / "kws_mlp_v2.yaml"
    v2_recipe.write_text(RECIPE.read_text().replace("seed: 0", "seed: 1"))
    return {"v1": RECIPE, "v2": v2_recipe}


@pytest.fixture(scope="session")
def builds(tmp_path_factory, recipes) -> dict[str, Path]:
    """v1 and v2 built for host, once per session."""
    folder = tmp_path_factory.mktemp("local-bundles")
    return {name: build(BuildOptions(recipe=recipe, target="host",
                                     out=folder / name)).bundle.path
            for name, recipe in recipes.items()}


@pytest.fixture
def v1(builds) -> Bundle:
    return load_bundle(builds["v1"])


@pytest.fixture
def v2(builds) -> Bundle:
    return load_bundle(builds["v2"])


@pytest.fixture
def bundle_copy(tmp_path):
    """A copy of a bundle to edit: edit(bundle, change) → the changed copy, loaded."""
    def edit(bundle: Bundle, change) -> Bundle:
        copy = tmp_path / f"edited-{len(list(tmp_path.glob('edited-*')))}"
        shutil.copytree(bundle.path, copy)
        change(copy)
        return load_bundle(copy)
    return edit


def rehash(directory: Path, relative: str, sign: bool = True) -> None:
    """Record a changed file's sha256 in the manifest (so only its content is wrong), signed
    again with the session's key unless `sign` is False (a bundle that a trusted signer
    built wrong, or an attacker's)."""
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"][relative] = sha256_file(directory / relative)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    if sign:
        sign_bundle(directory)


def set_manifest(directory: Path, sign: bool = True, **fields) -> None:
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest.update(fields)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2))
    if sign:
        sign_bundle(directory)


@pytest.fixture
def make_device(tmp_path):
    """make_device(name) → an empty device directory and its transport."""
    def make(name: str = "dev") -> LocalTransport:
        root = tmp_path / "devices" / name
        root.mkdir(parents=True)
        return LocalTransport(root)
    return make


def current_of(root: Path, app: str = APP) -> str | None:
    link = root / ".edgekit" / "apps" / app / "current"
    return link.readlink().name if link.is_symlink() else None


def releases_on(root: Path, app: str = APP) -> set[str]:
    path = root / ".edgekit" / "apps" / app / "releases"
    return {p.name for p in path.iterdir()} if path.is_dir() else set()


def device_journal(root: Path, app: str = APP) -> list[tuple[str, str]]:
    path = root / ".edgekit" / "apps" / app / "journal.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [(e["event"], e["release"]) for e in map(json.loads, lines)]
