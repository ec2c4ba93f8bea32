"""The device-side layout (a convention to keep stable; paths relative to the login's home):

    .edgekit/runtime/iree-<version>-<arch>/bin/{iree-run-module,iree-benchmark-module}
    .edgekit/shims/<shim-version>/{probe,verify,activate,run,bench}.sh
    .edgekit/apps/<app>/releases/<release-id>/{manifest.json,module.vmfb,golden/…}
    .edgekit/apps/<app>/current -> releases/<release-id>
    .edgekit/apps/<app>/journal.jsonl
    .edgekit/apps/<app>/newest            "<created_at> <release>" of the newest activated

and, while a deploy runs, its scratch beside `releases/` (dot names, tagged with the deploying
process, so the next deploy can tell a dead deploy's leftovers from a running one's):

    .edgekit/apps/<app>/.staging-<owner>-<rand>/     the upload, renamed into releases/
    .edgekit/apps/<app>/.validation-<owner>-<rand>/  outputs of the on-device validation
    .edgekit/apps/<app>/.trash-<owner>-<rand>/       a corrupted release moved aside
    .edgekit/apps/<app>/.inflight-<owner>-<release>  the release this deploy is putting live

Every name is validated (safe_name) before it becomes part of a path.
"""

from __future__ import annotations

from edgekit.config.address import safe_name

ROOT = ".edgekit"


def runtime_dir(version: str, arch: str) -> str:
    return f"{ROOT}/runtime/iree-{safe_name(version, 'runtime version')}-{safe_name(arch, 'arch')}"


def shims_dir(shim_version: str) -> str:
    return f"{ROOT}/shims/{safe_name(shim_version, 'shim version')}"


def app_dir(app: str) -> str:
    return f"{ROOT}/apps/{safe_name(app, 'app')}"


def release_dir(app: str, release: str) -> str:
    return f"{app_dir(app)}/releases/{safe_name(release, 'release')}"


def staging_dir(app: str, token: str) -> str:
    return f"{app_dir(app)}/.staging-{safe_name(token, 'staging token')}"


def validation_dir(app: str, token: str) -> str:
    return f"{app_dir(app)}/.validation-{safe_name(token, 'validation token')}"


def trash_dir(app: str, token: str) -> str:
    return f"{app_dir(app)}/.trash-{safe_name(token, 'trash token')}"


def inflight_marker(app: str, owner: str, release: str) -> str:
    return f"{app_dir(app)}/.inflight-{safe_name(owner, 'owner')}-{safe_name(release, 'release')}"


# the prefixes of the scratch entries above (and of activate.sh's temporary `current` link)
SCRATCH_PREFIXES = (".staging-", ".validation-", ".trash-", ".inflight-", ".current.")


def current_link(app: str) -> str:
    return f"{app_dir(app)}/current"


def newest_marker(app: str) -> str:
    """The build time and id of the newest release ever activated (deploy refuses older ones
    unless told: releases are monotonic; rollback is not a deploy and is not held to it)."""
    return f"{app_dir(app)}/newest"


def journal(app: str) -> str:
    return f"{app_dir(app)}/journal.jsonl"
