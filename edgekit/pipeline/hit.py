"""The end of every build, cold or cached: copy the cache entry beside `out`, check it is what
was built under this key, record the tuning note, publish it whole (torch-free)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from edgekit.errors import BundleError
from edgekit.models.bundle import TuningNote, load_bundle, write_manifest, write_tar
from edgekit.pipeline.publish import output_lock, publish, staging_dir
from edgekit.toolchain import iree
from edgekit.pipeline.cache import BuildCache
from edgekit.toolchain.signing import (own_key_tag, sign_bundle, signed_by_a_trusted_key,
                                       verify_bundle)


def cache_slot(cache: BuildCache, key: str) -> str:
    """Where this build is cached: under `key`, unless that entry was signed by a key this
    $EDGEKIT_HOME does not trust (a cache shared by several homes or users): then under `key`
    and this home's signing key, built here once. Trusting it would accept bundles nobody here
    signed; re-signing it would sign what this key never built."""
    entry = cache.lookup(key)
    if entry is None or signed_by_a_trusted_key(entry):
        return key
    return f"{key}-{own_key_tag()}"


def _check_copy(copy: Path, cached: bool, key: str, entry: Path) -> None:
    """The copy of cache `entry` is what its signer built, under this cache key (signed in its
    manifest): a cache entry changed after it was stored (another model swapped in with a
    re-hashed manifest, or another signed bundle copied over it) fails here."""
    try:
        bundle = load_bundle(copy)
        bundle.verify()
        verify_bundle(copy)
        if bundle.manifest.build_key != key:
            raise BundleError(f"it was built under cache key {bundle.manifest.build_key[:12]}…"
                              f", not {key[:12]}… (another build)", where=str(entry))
    except BundleError as exc:
        if not cached:
            raise
        raise type(exc)(f"the cached build is not what was built: {exc.what}", where=exc.where,
                        hint="`edgekit build --no-cache` rebuilds it and replaces the cache "
                             "entry") from None


def _record_tuning(out: Path, tuning: TuningNote | None) -> bool:
    """The tuning note, and the runtime driver it implies, live in the published manifest only:
    they are not part of the module's bytes, so re-tuning to the same variant stays a cache
    hit. (The driver is part of the release id: run.env carries it to the device.)"""
    bundle = load_bundle(out)
    m = bundle.manifest
    # the driver and worker count the tuner measured the choice with (local-sync for one
    # thread, local-task with N workers for N)
    driver, threads = iree.runtime_config(m.runtime_driver, tuning.threads if tuning else None)
    if m.tuning != tuning or m.runtime_driver != driver or m.runtime_threads != threads:
        write_manifest(out, m.model_copy(update={"tuning": tuning, "runtime_driver": driver,
                                                 "runtime_threads": threads}))
        return True   # the manifest changed: signed again
    return False


def _publish(entry: Path, out: Path, tuning: TuningNote | None, cached: bool,
             key: str) -> None:
    """Copy the cached bundle beside `out`, check it is what was built, finish it there (the
    tuning note, signed again), then publish it whole: readers of `out` see the old bundle or
    the new one, never a mix (publish.py)."""
    staging = staging_dir(out)
    try:
        shutil.copytree(entry, staging, dirs_exist_ok=True)
        _check_copy(staging, cached, key, entry)
        if _record_tuning(staging, tuning):
            sign_bundle(staging)
        publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)   # gone already when published


def _write_tar(out: Path) -> Path:
    archive = out.parent / f"{out.name}.tar"
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-tar-", dir=out.parent) as tmp:
        with output_lock(out, shared=True):
            write_tar(out, Path(tmp) / archive.name)
        os.replace(Path(tmp) / archive.name, archive)
    return archive
