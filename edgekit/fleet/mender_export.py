"""`edgekit export mender`: a bundle as a signed Mender artifact (`.mender`, payload type
`edgekit`) for fleets that Mender already updates.

The artifact is written by the real `mender-artifact` tool (`write module-image`), so what a
Mender server or client accepts is Mender's own format, not our reading of it. Its payload is
one tar, `edgekit-release.tar`, holding `release/`: the bundle's device payload, the same
directory the pull channel serves (channel/payload.py: the release's files as `edgekit
deploy` stages them, plus the signed plan install_bundle.sh validates with). The artifact's
meta-data names the app and the release; the device's update module
(runtime_shims/mender_edgekit) runs install_bundle.sh on the unpacked payload: the same
on-device steps as every other path (verify the bundle's own signatures and every sha256,
stage, validate against the golden outputs, switch `current`, hooks, roll back).

Two signatures, two keys: the bundle's manifest carries edgekit's (an SSH key, checked on the
device by verify.sh against its allowed signers), and the artifact carries Mender's, made
with the key given here: a PEM private key that mender-artifact 3.x reads, RSA in PKCS#1
form (`BEGIN RSA PRIVATE KEY`: `openssl genrsa -traditional -out mender.pem 3072`) or ECDSA
P-256 in SEC1 form (`BEGIN EC PRIVATE KEY`: `openssl ecparam -genkey -name prime256v1 -noout
-out mender.pem`). PKCS#8 (`BEGIN PRIVATE KEY`) and Ed25519 keys are refused by
mender-artifact 3.9 with a parse error, so they are refused here first, with the command that
makes a key it reads. A client configured with `ArtifactVerifyKey` (the public half) refuses
an artifact without a valid signature before the update module ever runs.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.address import safe_name
from edgekit.errors import ConfigError
from edgekit.toolchain.runner import run_tool

PAYLOAD_TYPE = "edgekit"          # the update module's name on the device
PAYLOAD = "edgekit-release.tar"   # the one file in the artifact's payload
FORMAT = 1                        # of the meta-data the update module reads
TOOL = "mender-artifact"
_KEY_HEADERS = ("-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----")
_DEVICE_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_MAKE_KEY = ("make one mender-artifact reads: openssl genrsa -traditional -out mender.pem 3072 "
             "(or openssl ecparam -genkey -name prime256v1 -noout -out mender.pem); give the "
             "devices its public half (openssl pkey -in mender.pem -pubout) as ArtifactVerifyKey")


@dataclass(frozen=True)
class MenderArtifact:
    path: Path
    name: str               # the artifact name Mender shows (`mender show-artifact`)
    app: str
    release: str
    device_types: tuple[str, ...]
    size: int               # bytes of the .mender file
    payload_size: int       # bytes of the release tar inside it (before compression)


def artifact_argv(payload: Path, meta: Path, out: Path, name: str, app: str, release: str,
                  device_types: tuple[str, ...], key: Path) -> list[str]:
    """mender-artifact's command line: one module-image payload of type `edgekit`, the
    release recorded as the software version of `rootfs-image.<app>` (what `mender
    show-provides` and a Mender server's inventory show), signed with `key`."""
    types = [arg for device_type in device_types for arg in ("--device-type", device_type)]
    return [TOOL, "write", "module-image", "--type", PAYLOAD_TYPE, *types,
            "--artifact-name", name, "--software-name", app, "--software-version", release,
            "--file", str(payload), "--meta-data", str(meta), "--key", str(key),
            "--output-path", str(out)]


def check_device_types(device_types: tuple[str, ...]) -> tuple[str, ...]:
    if not device_types:
        raise ConfigError("give at least one --device-type (what the devices' "
                          "/var/lib/mender/device_type says)", key="--device-type",
                          hint="edgekit export mender BUNDLE --device-type raspberrypi4 ...")
    for device_type in device_types:
        if not _DEVICE_TYPE.fullmatch(device_type):
            raise ConfigError(f"{device_type!r} is not a device type Mender matches "
                              "(letters, digits and ._+- only)", key="--device-type")
    return tuple(dict.fromkeys(device_types))


def check_key(key: Path) -> Path:
    """The signing key exists and is a PEM form mender-artifact 3.x reads (one clear line
    instead of its x509 parse error)."""
    try:
        head = key.read_bytes()[:200].decode("ascii", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read the signing key {key}: {exc.strerror}", key="--key",
                          hint=_MAKE_KEY) from None
    first = head.strip().splitlines()[0] if head.strip() else ""
    if first not in _KEY_HEADERS:
        found = first if first.startswith("-----BEGIN") else "no PEM private key"
        raise ConfigError(f"{key}: {found}; mender-artifact signs with an RSA (PKCS#1) or "
                          "ECDSA P-256 (SEC1) PEM private key", key="--key", hint=_MAKE_KEY)
    return key


def write_artifact(payload: Path, app: str, release: str, out: Path,
                   device_types: tuple[str, ...], key: Path, name: str | None = None,
                   meta: dict[str, str] | None = None) -> MenderArtifact:
    """Write `out` (.mender): the device payload directory `payload` (a release of `app`, as
    channel/payload.py writes it: install_bundle.sh's input) packed as release/… in one tar,
    the artifact's only payload file, signed with `key`."""
    device_types = check_device_types(device_types)
    check_key(key)
    app = safe_name(app, "app")
    release = safe_name(release, "release")
    name = name or f"{app}-{release}"
    if not _DEVICE_TYPE.fullmatch(name):
        raise ConfigError(f"{name!r} is not an artifact name (letters, digits and ._+- only)",
                          key="--name")
    if out.is_dir():
        raise ConfigError(f"{out} is a directory", key="--out",
                          hint=f"give a file name, e.g. {out / (name + '.mender')}")
    if shutil.which(TOOL) is None:
        raise ConfigError(f"{TOOL} is not installed", key="export mender",
                          hint="apt-get install mender-artifact (Debian 12: 3.9)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edgekit-mender-") as tmp:
        packed = Path(tmp) / PAYLOAD
        pack_payload(payload, packed)
        meta_file = Path(tmp) / "meta-data.json"
        meta_file.write_text(json.dumps({"edgekit": FORMAT, "app": app, "release": release,
                                         **(meta or {})}, indent=1) + "\n")
        partial = out.with_name(f".{out.name}.partial")
        try:
            run_tool(artifact_argv(packed, meta_file, partial, name, app, release,
                                   device_types, key),
                     what="mender-artifact could not write the artifact",
                     hint="is the key a passphrase-free PEM file mender-artifact reads?",
                     timeout=600)
            partial.replace(out)
        finally:
            partial.unlink(missing_ok=True)
        payload_size = packed.stat().st_size
    return MenderArtifact(out, name, app, release, device_types, out.stat().st_size,
                          payload_size)


def pack_payload(payload: Path, packed: Path) -> None:
    """release/<file> for every file of the payload directory: plain files only, no owners,
    fixed mode and time, so the same payload gives the same bytes (the update module refuses
    any other kind of entry)."""
    files = sorted(p for p in payload.rglob("*") if not p.is_dir())
    with tarfile.open(packed, "w", format=tarfile.USTAR_FORMAT) as tar:
        for source in files:
            if source.is_symlink() or not source.is_file():
                raise ConfigError(f"{source} is not a plain file", key="payload")
            info = tarfile.TarInfo(f"release/{source.relative_to(payload).as_posix()}")
            info.size = source.stat().st_size
            info.mode = 0o644
            info.mtime = 0
            with source.open("rb") as f:
                tar.addfile(info, f)
