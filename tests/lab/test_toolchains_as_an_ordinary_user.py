"""NPU toolchains for the user who runs edgekit: an ordinary user (a temporary one when the
tests run as root, with root's home hidden) finds the machine's shared venvs, and a toolchain
that is neither theirs nor shared is answered with the command that installs it for them.
Nothing is downloaded: the shared venvs are their markers (what the lookup reads)."""

import json
import shutil
import sys
import tempfile
from pathlib import Path

from edgekit.toolchain import venvs
from tests.lab.ordinary_user import ordinary_user

WORKTREE = Path(__file__).resolve().parents[2]
MODELS = "edgekit.examples.models"


def test_an_ordinary_user_finds_the_shared_toolchains_and_is_told_how_to_install_the_rest():
    shared = Path(tempfile.mkdtemp(prefix="edgekit-shared-toolchains-", dir="/tmp"))
    try:
        shared.chmod(0o755)                              # as an administrator leaves it
        tosa = venvs.toolchain("tosa")
        (shared / "tosa").mkdir(mode=0o755)
        (shared / "tosa" / venvs.MARKER).write_text(json.dumps(
            {"name": "tosa", "versions": dict(p.split("==") for p in tosa.packages)}))
        with ordinary_user(reveal=[]) as user:
            recipe = user.home / "cnn.yaml"
            recipe.write_text(f'name: cnn\nmodel: {{python: "{MODELS}:small_cnn"}}\n'
                              f'quantize: {{mode: int8, calibration: '
                              f'"{MODELS}:small_cnn_calibration"}}\n')
            user.chown(user.home)
            cache = user.home / "cache"
            env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(WORKTREE),
                   "EDGEKIT_HOME": str(user.home / "edgekit"), "EDGEKIT_CACHE_DIR": str(cache),
                   "EDGEKIT_SHARED_TOOLCHAINS_DIR": str(shared)}

            def edgekit(*args: str):
                return user.run([sys.executable, "-m", "edgekit.cli.main", *args], env)

            listed = edgekit("toolchains", "list", "--json")
            assert listed.returncode == 0, listed.stderr
            rows = {row["name"]: row for row in json.loads(listed.stdout)}
            assert rows["tosa"]["installed"] and rows["tosa"]["directory"] == str(shared / "tosa")
            assert not rows["executorch"]["installed"]
            assert rows["executorch"]["directory"] == str(cache / "toolchains" / "executorch")

            built = edgekit("build", "--recipe", str(recipe), "--target", "imx93-npu")
            assert built.returncode == 5, built.stderr
            assert "Traceback" not in built.stderr
            assert f"looked in {cache / 'toolchains'} or {shared}" in built.stderr
            assert "run `edgekit toolchains install npu`" in built.stderr
    finally:
        shutil.rmtree(shared, ignore_errors=True)
