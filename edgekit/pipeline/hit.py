"""The end of every build, cold or cached: copy the cache entry beside `out`, check it is what
was built under this key, record the tuning note, publish it whole (torch-free)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from edgekit.errors import BundleError
from edgekit.models.bundle import Bundle, Manifest, TuningNote, write_manifest, write_tar
from edgekit.pipeline.publish import output_lock, publish, staging_dir
from edgekit.toolchain import iree
from edgekit.pipeline.cache import BuildCache
from edgekit.toolchain.signing import (own_key_tag, own_principal, sign_bundle,
                                       signed_by_a_trusted_key)
from edgekit.toolchain.verified import VerifiedBundle, open_verified, signed_by_us


def cache_slot(cache: BuildCache, key: str) -> str:
    """Where this build is cached: under `key`, unless that entry was signed by a key this
    $EDGEKIT_HOME does not trust (a cache shared by several homes or users): then under `key`
    and this home's signing key, built here once. Trusting it would accept bundles nobody here
    signed; re-signing it would sign what this key never built."""
    entry = cache.lookup(key)
    if entry is None or signed_by_a_trusted_key(entry):
        return key
    return f"{key}-{own_key_tag()}"


def _check_copy(copy: Path, cached: bool, key: str, entry: Path) -> VerifiedBundle:
    """The copy of cache `entry` is what its signer built, under this cache key (signed in its
    manifest): a cache entry changed after it was stored (another model swapped in with a
    re-hashed manifest, or another signed bundle copied over it) fails here. Parsed and
    verified once: the deploy that follows takes the returned bundle as it is."""
    try:
        bundle = open_verified(copy)
        if bundle.manifest.build_key != key:
            raise BundleError(f"it was built under cache key {bundle.manifest.build_key[:12]}…"
                              f", not {key[:12]}… (another build)", where=str(entry))
    except BundleError as exc:
        if not cached:
            raise
        raise type(exc)(f"the cached build is not what was built: {exc.what}", where=exc.where,
                        hint="`edgekit build --no-cache` rebuilds it and replaces the cache "
                             "entry") from None
    return bundle


def tuned_manifest(m: Manifest, tuning: TuningNote | None) -> Manifest | None:
    """The manifest with the tuning note and the runtime driver and worker count the tuner
    measured the choice with (local-sync for one thread, local-task with N workers for N);
    None when they are recorded already."""
    driver, threads = iree.runtime_config(m.runtime_driver, tuning.threads if tuning else None)
    if m.tuning == tuning and m.runtime_driver == driver and m.runtime_threads == threads:
        return None
    return m.model_copy(update={"tuning": tuning, "runtime_driver": driver,
                                "runtime_threads": threads})


def _record_tuning(bundle: VerifiedBundle, tuning: TuningNote | None) -> VerifiedBundle:
    """The tuning note, and the runtime driver it implies, live in the published manifest only:
    they are not part of the module's bytes, so re-tuning to the same variant stays a cache
    hit. (The driver is part of the release id: run.env carries it to the device.) A changed
    manifest is signed again, here, by this home's key."""
    changed = tuned_manifest(bundle.manifest, tuning)
    if changed is None:
        return bundle
    write_manifest(bundle.path, changed)
    sign_bundle(bundle.path)
    return signed_by_us(Bundle(bundle.path, changed), own_principal())


def _publish(entry: Path, out: Path, tuning: TuningNote | None, cached: bool,
             key: str) -> VerifiedBundle:
    """Copy the cached bundle beside `out` (the one copy a build makes), check it is what was
    built, finish it there (the tuning note, signed again), then publish it whole: readers of
    `out` see the old bundle or the new one, never a mix (publish.py). Returns the bundle at
    `out` as it was verified (not read again)."""
    staging = staging_dir(out)
    try:
        shutil.copytree(entry, staging, dirs_exist_ok=True)
        bundle = _record_tuning(_check_copy(staging, cached, key, entry), tuning)
        publish(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)   # gone already when published
    return bundle.moved_to(out)


def _write_tar(out: Path) -> Path:
    archive = out.parent / f"{out.name}.tar"
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-tar-", dir=out.parent) as tmp:
        with output_lock(out, shared=True):
            write_tar(out, Path(tmp) / archive.name)
        os.replace(Path(tmp) / archive.name, archive)
    return archive
