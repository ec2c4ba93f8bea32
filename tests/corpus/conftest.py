import pytest

from edgekit.lab.rootfs import ensure_rootfs


@pytest.fixture(scope="session")
def arm64_userland():
    """The arm64 lab userland (built once per machine; as root) whose glibc runs the aarch64
    iree-run-module under qemu."""
    return ensure_rootfs()


def needs_arm64_userland(item: pytest.Item) -> bool:
    if "arm64_userland" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("target") == "rpi4"


@pytest.fixture
def userland_for(request):
    """userland_for(target): the arm64 userland when `target` runs under qemu, else None — a
    host case does not wait for it (on a fresh machine another worker may be building it)."""
    return lambda target: request.getfixturevalue("arm64_userland") if target == "rpi4" else None


def pytest_collection_modifyitems(config, items):
    """The corpus's host cases first, then those under qemu: the corpus shares one worker, and
    on a fresh machine the lab's worker builds the arm64 userland at its start (~2 min) — the
    host cases run meanwhile instead of the corpus worker waiting on its lock."""
    corpus = [i for i in items if "tests/corpus/" in str(i.path).replace("\\", "/")]
    if not corpus:
        return
    first = items.index(corpus[0])
    ordered = sorted(corpus, key=needs_arm64_userland)        # stable: host cases keep order
    in_corpus = set(corpus)
    rest = [i for i in items if i not in in_corpus]
    items[:] = rest[:first] + ordered + rest[first:]
