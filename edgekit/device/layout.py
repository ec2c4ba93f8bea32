"""The device-side layout (a convention to keep stable; paths relative to the login's home):

    .edgekit/runtime/iree-<version>-<arch>/bin/{iree-run-module,iree-benchmark-module}
    .edgekit/shims/<shim-version>/{probe,verify,activate,run,bench}.sh
    .edgekit/apps/<app>/releases/<release-id>/{manifest.json,module.vmfb,golden/…}
    .edgekit/apps/<app>/current -> releases/<release-id>
    .edgekit/apps/<app>/journal.jsonl

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


def current_link(app: str) -> str:
    return f"{app_dir(app)}/current"


def journal(app: str) -> str:
    return f"{app_dir(app)}/journal.jsonl"
