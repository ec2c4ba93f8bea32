"""A cache hit without the toolchain: the build key found from the model's *sources*.

The build key (build.py `build_key`) hashes the exported program, so finding it costs a
torch import, the factory call and torch.export — ~26% of a cold build even on a hit. A
*source key* hashes what is cheap and, together with what the build read, sufficient:
the recipe and the build options, the target profile, the toolchain versions, and the model's
sources — the .pt2/.onnx file, or the factory's module graph (the factory's module and every
module of the project it imports, statically, followed transitively). A build that computed
the full key stores, under the source key, a record: that key, the tuning note it published,
and every file the build's FRONT stages and its steering read (an audit hook sees each `open`:
weights, samples, ONNX external data, modules imported at run time), each with its sha256.
A later build answers from the record only when every one of those files is unchanged and the
cache still holds the entry; anything else falls back to the full key (a miss here is never
an error). The fallback is also the only path when the sources cannot decide:
- the factory's module lives outside the project (an installed package: its own code may read
  anything at all), or it cannot be found without importing it;
- the build's steering does not declare the files it read (`Steering.read_from is None`);
- the model is not deterministic: a record is only written after a second load+export of the
  same sources gave the same program digest.
Known blind spot: a factory that reads weights without Python's `open`/`os.open` (a Rust or C
extension opening the file itself, e.g. safetensors' `safe_open`), or from the network.
`edgekit build --no-cache` rebuilds and replaces both entry and record.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import site
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from edgekit.config.paths import cache_root
from edgekit.config.profiles import Target, load_target
from edgekit.config.recipe import Recipe, load_recipe
from edgekit.models.bundle import TuningNote
from edgekit.pipeline.build_types import BuildOptions, BuildResult, Steer, default_out
from edgekit.pipeline.cache import BuildCache, cache_key
from edgekit.pipeline.hit import _publish, _write_tar, cache_slot
from edgekit.pipeline.npu.registry import family_for
from edgekit.toolchain.versions import edgekit_code_digest, toolchain_versions

SCHEMA = 1


# --- the model's sources -----------------------------------------------------------------------

@functools.cache
def _installed_roots() -> tuple[str, ...]:
    """Where installed code lives (stdlib, site-packages): not the project's."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    roots.update({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def _installed(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(_installed_roots()) or real.startswith(("/proc/", "/sys/", "/dev/"))


def _module_file(name: str) -> str | None:
    """The file of module `name`, found without running any of its packages' code (None when
    it is not a plain source file: builtin, extension, namespace-only, missing)."""
    top, *rest = name.split(".")
    spec = sys.modules[top].__spec__ if top in sys.modules else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)   # a top-level name: runs no package code
        except (ImportError, ValueError):
            return None
    if spec is None:
        return None
    if not rest:
        return spec.origin if spec.origin and spec.origin.endswith(".py") else None
    dirs = list(spec.submodule_search_locations or ())
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = None
        for d in dirs:
            package = os.path.join(d, part)
            if os.path.isfile(os.path.join(package, "__init__.py")):
                found = package
                break
            if last and os.path.isfile(package + ".py"):
                return package + ".py"
        if found is None:
            return None
        if last:
            return os.path.join(found, "__init__.py")
        dirs = [found]
    return None


def _imports(path: str, package: str) -> set[str]:
    """Every module name `path` may import (statically): `import a.b`, `from a import b` (a, and
    a.b if that is a module), relative imports resolved against `package`."""
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(p for p in [*parts, base] if p)
            if base:
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    # importing a.b.c runs a and a.b first
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 2)}


def module_graph(module: str | None, path: str) -> dict[str, str] | None:
    """sha256 of the factory's module and every project module it imports, transitively (None
    when the factory's own module is installed code: it cannot decide)."""
    if _installed(path):
        return None
    files: dict[str, str] = {}
    todo = [(module, path)]
    while todo:
        name, file = todo.pop()
        real = os.path.realpath(file)
        if real in files:
            continue
        files[real] = _sha256(real)
        is_package = os.path.basename(file) == "__init__.py"
        package = (name if is_package else name.rpartition(".")[0]) if name else ""
        for dep in _imports(file, package):
            dep_file = _module_file(dep)
            if dep_file and not _installed(dep_file):
                todo.append((dep, dep_file))
    return files


def model_sources(recipe: Recipe) -> dict[str, str] | None:
    """The model's source files with their sha256, or None when they cannot decide."""
    source = recipe.model
    if not source.python:       # a model file (any kind): its bytes; what it refers to (external
        # data) is read at load, so recorded with the build's reads
        model_file = next(v for k, v in source.model_dump().items() if isinstance(v, str))
        path = recipe.resolve(model_file)
        return {str(path.resolve()): _sha256(str(path))} if path.is_file() else None
    module_part = source.python.rpartition(":")[0]
    if module_part.endswith(".py"):
        path = recipe.resolve(module_part)
        return module_graph(None, str(path)) if path.is_file() else None
    path = _module_file(module_part)
    return module_graph(module_part, path) if path else None


def _sha256(path: str) -> str | None:
    """A file's sha256; None when it is not there (an absent file is a state too)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _steer_name(steer: Steer | None) -> str | None:
    """The steering's identity in the key; None when it does not declare what it reads."""
    if steer is None:
        return "none"
    if getattr(steer, "declares_reads", False):
        return f"{steer.__module__}.{steer.__qualname__}"
    return None


def source_key(options: BuildOptions, recipe: Recipe, target: Target) -> str | None:
    """The key a build's record is kept under: `recipe` as loaded (before the `quantize`
    override, which enters as an option), or None when the sources cannot decide."""
    steer = _steer_name(options.steer)
    sources = model_sources(recipe) if steer else None
    if sources is None:
        return None
    variant = options.variant
    family = family_for(target)
    npu = {"npu": family.installed_versions()} if family is not None else {}
    return cache_key({**npu,
        "schema": SCHEMA,
        "recipe": recipe.model_dump(mode="json"),
        "recipe_at": str(recipe.path.resolve()),        # relative paths resolve against it
        "trust_pickle": recipe.model.trust_pickle or options.trust_pickle,
        "quantize": options.quantize,
        "use_tuned": options.use_tuned,
        "variant": [variant.lowering, variant.flag_set, list(variant.flags)] if variant else None,
        "steer": steer,
        "target": target.fingerprint(),
        "toolchain": toolchain_versions(),
        "python": sys.version,
        "edgekit": edgekit_code_digest(),
        "sources": sources,
    })


# --- what the build read -----------------------------------------------------------------------

_RECORDERS: list[tuple[set[str], set[str]]] = []   # (read, written) of the active recordings
_HOOKED = threading.Lock()
_hook_installed = False


def _audit(event: str, args: tuple) -> None:
    if event != "open" or not _RECORDERS:
        return
    path, mode, flags = (tuple(args) + (None, None))[:3]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return                                   # an fd
    path = os.path.abspath(os.fsdecode(path))
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
        (mode is None and isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
    read, written = _RECORDERS[-1]
    (written if writes else read).add(path)


class Recording:
    """Collects the project files opened for reading from its start to `stop()` (audit hook
    on `open`, PEP 578): files written meanwhile (temporaries, outputs) and installed code are
    left out, and a compiled `__pycache__/*.pyc` stands for its source."""

    def __init__(self) -> None:
        global _hook_installed
        with _HOOKED:
            if not _hook_installed:      # audit hooks cannot be removed: one, idle when unused
                sys.addaudithook(_audit)
                _hook_installed = True
        self._seen: tuple[set[str], set[str]] | None = (set(), set())
        self.files: set[str] = set()
        _RECORDERS.append(self._seen)

    def stop(self) -> set[str]:
        """The files read (the same set on a second call)."""
        if self._seen is None:
            return self.files
        # by identity: two recordings' sets may be equal (a nested one, both still empty)
        del _RECORDERS[next(i for i, r in enumerate(_RECORDERS) if r is self._seen)]
        read, written = self._seen
        self._seen = None
        for path in read - written:
            if os.path.basename(os.path.dirname(path)) == "__pycache__" and path.endswith(".pyc"):
                stem = os.path.basename(path).split(".")[0]
                path = os.path.join(os.path.dirname(os.path.dirname(path)), stem + ".py")
            if os.path.isfile(path) and not _installed(path):
                self.files.add(os.path.realpath(path))
        return self.files


@contextlib.contextmanager
def recording_reads() -> Iterator[set[str]]:
    """The files read inside the block (a Recording), complete when the block ends."""
    recording = Recording()
    try:
        yield recording.files
    finally:
        recording.stop()


# --- records -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SourceRecord:
    key: str                              # the full build key
    tuning: TuningNote | None             # what the build published with it
    files: dict[str, str | None]          # path → sha256 (None: absent) when the key was made

    def still_holds(self) -> bool:
        return all(_sha256(path) == digest for path, digest in self.files.items())


def _record_path(skey: str) -> Path:
    return cache_root() / "sources" / f"{skey}.json"


def load_record(skey: str) -> SourceRecord | None:
    try:
        data = json.loads(_record_path(skey).read_text())
        tuning = TuningNote.model_validate(data["tuning"]) if data["tuning"] else None
        return SourceRecord(key=data["key"], tuning=tuning, files=dict(data["files"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None        # none yet, or from another edgekit: the full key decides


def store_record(skey: str, key: str, tuning: TuningNote | None, files: set[str]) -> None:
    """Keep what the source key stands for (written whole: a reader sees the old or the new)."""
    path = _record_path(skey)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"key": key, "tuning": tuning.model_dump(mode="json") if tuning else None,
            "files": {f: _sha256(f) for f in sorted(files)}}
    fd, tmp = tempfile.mkstemp(prefix=f".{skey[:12]}-", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def loaded_recipe(options: BuildOptions) -> Recipe:
    """The recipe as the source key sees it (before the `quantize` override)."""
    recipe = options.recipe_override or load_recipe(options.recipe)
    return recipe.trusting_pickle() if options.trust_pickle else recipe


def hit_from_sources(options: BuildOptions) -> BuildResult | None:
    """The cached bundle, published to `out`, when the sources' record still holds and the cache
    still has its entry; None otherwise (the caller builds, or finds the hit by the full key).
    Imports no torch, torch-mlir or IREE compiler."""
    if not options.use_cache:
        return None
    started = time.perf_counter()
    recipe = loaded_recipe(options)
    target = load_target(options.target)
    skey = source_key(options, recipe, target)
    record = load_record(skey) if skey else None
    if record is None or not record.still_holds():
        return None
    cache = BuildCache()
    entry = cache.lookup(cache_slot(cache, record.key))
    if entry is None:
        return None
    checked = round(time.perf_counter() - started, 3)
    out = (options.out or default_out(recipe, target)).resolve()
    if options.private:
        out = Path(tempfile.mkdtemp(prefix="edgekit-bundle-")) / out.name
    bundle = _publish(entry, out, record.tuning, True, record.key)   # parsed, verified once
    tar = _write_tar(out) if options.tar else None
    return BuildResult(bundle=bundle, cached=True, seconds=time.perf_counter() - started,
                       stage_seconds={"source key": checked}, tar=tar)
