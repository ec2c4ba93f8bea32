"""The lab needs no root: an ordinary user (a temporary one when the tests run as root) starts
an x86_64 and an aarch64 lab device, deploys a tiny model to each and validates it there, and
stops them — README's commands, as printed."""

import json
import shutil
import sys
from pathlib import Path

from edgekit.device.provision import runtime_tools
from edgekit.lab.rootfs import ensure_rootfs
from edgekit.toolchain.versions import iree_runtime_version
from tests.conftest import TINY
from tests.lab.ordinary_user import ordinary_user

WORKTREE = Path(__file__).resolve().parents[2]


def test_an_ordinary_user_deploys_and_validates_on_x86_64_and_aarch64_lab_devices():
    rootfs = ensure_rootfs()            # built once per machine (cached)
    version = iree_runtime_version()
    arm_tools = runtime_tools("aarch64", version)   # fetched once (cached), so no network here
    with ordinary_user(reveal=[rootfs]) as user:
        cache = user.home / "cache"
        shutil.copytree(arm_tools, cache / "runtime" / f"iree-{version}-aarch64" / "bin")
        recipe = user.home / "recipe.yaml"
        recipe.write_text(f'name: tiny\nmodel:\n  python: "{TINY}:linear_softmax"\n')
        user.chown(user.home)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
               "PYTHONPATH": str(WORKTREE), "EDGEKIT_HOME": str(user.home / "edgekit"),
               "EDGEKIT_CACHE_DIR": str(cache), "EDGEKIT_ROOTFS_DIR": str(rootfs)}

        def edgekit(*args: str):
            return user.run([sys.executable, "-m", "edgekit.cli.main", *args], env)
        try:
            for arch in ("x86_64", "aarch64"):
                up = edgekit("lab", "up", "--arch", arch)
                assert up.returncode == 0, up.stderr
                assert up.stdout.startswith(f"lab-{arch}-1: {user.name}@127.0.0."), up.stdout
            status = json.loads(edgekit("lab", "status", "--json").stdout)
            assert {d["name"]: d["running"] for d in status} == {"lab-x86_64-1": True,
                                                                 "lab-aarch64-1": True}
            assert {d["user"] for d in status} == {user.name}
            for target, name in (("host", "lab-x86_64-1"), ("rpi4", "lab-aarch64-1")):
                proc = edgekit("deploy", "--target", target, "--recipe", str(recipe),
                               "--host", name, "--json")
                assert proc.returncode == 0, proc.stderr
                result = json.loads(proc.stdout)
                assert result["report"]["ok"] and result["activated"], result
            arm = next(d for d in status if d["arch"] == "aarch64")
            runtime = Path(arm["host_home"]) / ".edgekit" / "runtime" / f"iree-{version}-aarch64"
            assert runtime.stat().st_uid == user.uid     # the device's files are the user's
        finally:
            down = edgekit("lab", "down")
        assert down.returncode == 0, down.stderr
        assert "stopped 2 lab device(s)" in down.stdout
