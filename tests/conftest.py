import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny_models.py"


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("edgekit-cache")


@pytest.fixture(autouse=True)
def isolated_edgekit(monkeypatch, shared_cache, tmp_path):
    """Every test gets the session's build cache (not the user's) and its own working dir."""
    monkeypatch.setenv("EDGEKIT_CACHE_DIR", str(shared_cache))
    monkeypatch.delenv("EDGEKIT_TARGETS_PATH", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def write_recipe(tmp_path):
    """Write a recipe YAML (dedented) into the test's directory and return its path."""
    def write(text: str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip().replace("@TINY@", str(TINY)))
        return path
    return write
