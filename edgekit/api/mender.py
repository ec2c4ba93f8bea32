"""Mender as the engine: `edgekit export mender` (a bundle as a signed `.mender` artifact) and
`edgekit agent install --mender HOST` (edgekit's update module and what it runs on the device).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.channel.payload import write_payload
from edgekit.config.resources import shims_dir
from edgekit.device.probe import probe
from edgekit.device.provision import provision, sync_files
from edgekit.device.trust import check_signature, install_signers
from edgekit.errors import BundleNotTrusted, ConfigError, DeviceAnswerRefused
from edgekit.fleet.mender_export import PAYLOAD_TYPE, MenderArtifact, check_device_types, \
    check_key, write_artifact
from edgekit.models.bundle import load_bundle, require_bundle_path
from edgekit.transport import open_device

MODULES_DIR = "/usr/share/mender/modules/v3"    # where mender-client 3.x looks for modules
MODULE_SOURCE = "mender_edgekit"                # in runtime_shims/
_DEVICE_PATH = re.compile(r"/[A-Za-z0-9._/+@-]*")


@dataclass(frozen=True)
class MenderExportOptions:
    bundle: Path                     # a bundle directory or .tar (edgekit build's output)
    out: Path                        # the .mender file to write
    device_types: tuple[str, ...]    # what the devices' Mender device_type says
    key: Path                        # PEM private key mender-artifact signs with
    name: str | None = None          # the artifact name (default: <app>-<release>)


def export_mender(options: MenderExportOptions) -> MenderArtifact:
    """Write the bundle as a signed Mender artifact of payload type `edgekit`: its device
    payload (the pull channel's, with the signed plan the device validates with) packed by
    mender-artifact. The bundle must carry a trusted edgekit signature: the device checks it
    again and refuses an unsigned release whatever Mender's signature says."""
    check_device_types(tuple(options.device_types))
    check_key(Path(options.key))      # both before the bundle is read: one line, early
    require_bundle_path(Path(options.bundle))
    bundle = load_bundle(options.bundle)
    try:
        try:
            check_signature(bundle)
        except BundleNotTrusted as exc:
            if "--allow-unsigned" not in (exc.hint or ""):
                raise
            # the deploy's hint: an export has no such opt-out (devices refuse it anyway)
            raise BundleNotTrusted(exc.what, where=exc.where,
                                   hint="build it with `edgekit build` (it signs with your "
                                        "key): devices install only releases their allowed "
                                        "signers signed") from None
        with tempfile.TemporaryDirectory(prefix="edgekit-mender-payload-") as tmp:
            payload = write_payload(bundle, Path(tmp) / "payload")
            return write_artifact(payload.directory, payload.app, payload.release,
                                  Path(options.out), tuple(options.device_types),
                                  Path(options.key), options.name,
                                  meta={"created_at": payload.created_at,
                                        "compiler_version": bundle.manifest.compiler_version,
                                        "arch": bundle.manifest.arch})
    finally:
        bundle.release()


@dataclass(frozen=True)
class MenderModuleInstall:
    host: str
    module: str              # where the update module now is on the device
    shims: str               # the shims it runs (absolute, as the device sees it)
    runtime: str             # the IREE runtime provisioned for validation (absolute)
    uploaded: tuple[str, ...]


def install_mender_module(host: str, modules_dir: str = MODULES_DIR,
                          identity: Path | None = None) -> MenderModuleInstall:
    """Put edgekit's update module into `modules_dir` on `host` (mender-client 3.x reads
    /usr/share/mender/modules/v3; writing there needs a login that may), with what it runs:
    the shims, the IREE runtime of this edgekit's compiler (on-device validation) and this
    host's trusted signers (the module refuses a release they did not sign)."""
    if not _DEVICE_PATH.fullmatch(modules_dir) or "/../" in f"{modules_dir}/":
        raise ConfigError(f"{modules_dir!r} is not a plain absolute path",
                          key="--modules-dir", hint=f"the default is {MODULES_DIR}")
    with open_device(host, identity) as conn:
        info = probe(conn)
        provisioned = provision(conn, info)
        install_signers(conn)
        home = conn.run(["sh", "-c", 'printf %s "$HOME"'], what="reading the device's home").text
        if not _DEVICE_PATH.fullmatch(home) or "/../" in f"{home}/":
            raise DeviceAnswerRefused(f"the device's home {home[:80]!r} is not a plain path",
                                      where=conn.where)
        shims = f"{home}/{provisioned.shims_dir}"
        uploaded = list(provisioned.uploaded)
        text = (shims_dir() / MODULE_SOURCE).read_text()
        text = text.replace("EDGEKIT_HOME=@EDGEKIT_HOME@\n", f"EDGEKIT_HOME='{home}'\n")
        text = text.replace("SHIMS=@SHIMS@\n", f"SHIMS='{shims}'\n")
        with tempfile.TemporaryDirectory(prefix="edgekit-module-") as tmp:
            module = Path(tmp) / PAYLOAD_TYPE
            module.write_text(text)
            sync_files(conn, [(module, f"{modules_dir}/{PAYLOAD_TYPE}")], uploaded, mode=0o755)
        conn.run(["sh", "-n", f"{modules_dir}/{PAYLOAD_TYPE}"],
                 what="the installed update module does not parse")
    return MenderModuleInstall(host, f"{modules_dir}/{PAYLOAD_TYPE}", shims,
                               f"{home}/{provisioned.runtime_dir}", tuple(uploaded))


__all__ = ["MODULES_DIR", "MenderArtifact", "MenderExportOptions", "MenderModuleInstall",
           "export_mender", "install_mender_module"]
