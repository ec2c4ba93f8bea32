"""The same bundle shipped as a signed `.mender` artifact (real `mender-artifact`) and
installed by the real Debian `mender-client` 3.4 in standalone mode (`mender install`,
`mender commit`) on an x86_64 lab device, through edgekit's update module (issue 35).

mender-client 3.x reads its update modules from /usr/share/mender/modules/v3 and its
artifact_info and config from /etc/mender, whatever `--config` says; the lab device runs it
in a user and mount namespace of its own (as the lab runs every session) where the device's
own folders are bound over those two. Its state is in `--data`, under the device's home."""

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from edgekit.channel.payload import write_payload
from edgekit.fleet.mender_export import PAYLOAD, pack_payload
from edgekit.lab import devices as lab
from edgekit.models.bundle import load_bundle
from edgekit.toolchain.signing import sign_bundle
from edgekit.transport import open_device
from tests.integration.helpers import edgekit, tamper_golden_output

APP = "mender-app"
RECIPE = ('name: mender-app\nmodel:\n  python: "@TINY@:{factory}"\n'
          'hooks: {{health: \'test ! -f "$HOME/fail-health"\'}}\n')
M = "mender"    # the client's folders in the device's home: modules, etc, data
# the client, with the device's folders bound over the paths mender-client 3.4 fixes
RUN_MENDER = ('cd "$HOME" && exec unshare -Urm sh -c \''
              'mount --bind "$HOME/mender/modules" /usr/share/mender/modules/v3 && '
              'mount --bind "$HOME/mender/etc" /etc/mender && '
              'exec mender --no-syslog --data "$HOME/mender/data" "$@"\' mender "$@"')


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    dev = lab.up("x86_64", 1, names=["lab-mender-1"])[0]
    home = dev.host_path(dev.home)
    for folder in ("modules", "etc", "data"):
        (home / M / folder).mkdir(parents=True, exist_ok=True)
    (home / M / "etc" / "artifact_info").write_text("artifact_name=factory\n")
    (home / M / "data" / "device_type").write_text("device_type=edgekit-lab\n")
    keys = tmp_path_factory.mktemp("mender-keys")
    for name in ("ours", "other"):
        subprocess.run(["openssl", "genrsa", "-traditional", "-out", keys / f"{name}.pem",
                        "3072"], check=True, capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", keys / "ours.pem", "-pubout", "-out",
                    home / M / "etc" / "verify-key.pem"], check=True, capture_output=True)
    # the client refuses any artifact this key did not sign
    (home / M / "etc" / "mender.conf").write_text(json.dumps(
        {"ArtifactVerifyKey": "/etc/mender/verify-key.pem"}))
    proc = edgekit("agent", "install", "--mender", dev.name, "--modules-dir",
                   f"{dev.home}/{M}/modules")
    assert proc.returncode == 0, proc.stderr
    yield dev, keys
    lab.down([dev.name])


def mender(dev, *args):
    """(exit code, stdout and stderr together) of the device's mender-client."""
    with open_device(dev.name) as conn:
        result = conn.run(["sh", "-c", RUN_MENDER, "mender", *args], check=False, timeout=300)
    return result.returncode, result.stdout.decode() + result.stderr.decode()


def artifact_name(dev):
    with open_device(dev.name) as conn:
        result = conn.run(["sh", "-c", RUN_MENDER, "mender", "show-artifact"], timeout=60)
    return result.text.strip()


def put(dev, artifact):
    target = dev.host_path(f"{dev.home}/{artifact.name}")
    shutil.copyfile(artifact, target)
    return artifact.name


def build(write_recipe, factory, name):
    recipe = write_recipe(RECIPE.format(factory=factory), name=f"{name}.yaml")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["bundle"]


def export(bundle, key, out):
    proc = edgekit("export", "mender", str(bundle), "--device-type", "edgekit-lab",
                   "--key", str(key), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def current_of(dev):
    link = dev.host_path(f"{dev.home}/.edgekit/apps/{APP}/current")
    return link.readlink().name if link.is_symlink() else None


def journal_of(dev):
    path = dev.host_path(f"{dev.home}/.edgekit/apps/{APP}/journal.jsonl")
    lines = path.read_text().splitlines() if path.is_file() else []
    return [(e["event"], e["release"]) for e in map(json.loads, lines)]


def test_a_signed_artifact_installs_validates_and_commits_through_mender_client(
        device, write_recipe, tmp_path):
    dev, keys = device
    bundle = build(write_recipe, "linear_softmax", "first")
    started = time.monotonic()
    first = export(bundle, keys / "ours.pem", tmp_path / "first.mender")
    exported = time.monotonic()
    artifact = put(dev, tmp_path / "first.mender")

    code, log = mender(dev, "install", artifact)
    installed = time.monotonic()
    assert code == 0, log
    # validated on the device, not live until the commit
    assert journal_of(dev)[-1] == ("validated", first["release"])
    assert current_of(dev) is None
    code, log = mender(dev, "commit")
    assert code == 0, log
    print(f"\nartifact {first['bytes']} bytes (payload tar {first['payload_bytes']}); "
          f"export {exported - started:.2f} s, mender install (download, stage, validate) "
          f"{installed - exported:.2f} s, commit (switch, health hook) "
          f"{time.monotonic() - installed:.2f} s")
    assert current_of(dev) == first["release"]
    assert ("activate", first["release"]) in journal_of(dev)
    assert artifact_name(dev) == first["name"]

    # `edgekit fleet status` reads what the module journaled, as for any deploy
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"devices:\n  {dev.name}: {{target: host}}\n")
    status = edgekit("fleet", "status", "--fleet", str(fleet), "--app", APP, "--json")
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)[0]
    assert row["last_validation"]["ok"] is True
    assert row["last_validation"]["release"] == first["release"]


def test_mender_rollback_before_the_commit_keeps_current_and_leaves_nothing_staged(
        device, write_recipe, tmp_path):
    dev, keys = device
    live = current_of(dev)
    assert live, "runs after the first install"
    second = export(build(write_recipe, "conv_mean", "second"), keys / "ours.pem",
                    tmp_path / "second.mender")
    code, log = mender(dev, "install", put(dev, tmp_path / "second.mender"))
    assert code == 0, log
    assert journal_of(dev)[-1] == ("validated", second["release"])
    code, log = mender(dev, "rollback")
    assert code == 0, log
    assert current_of(dev) == live
    releases = dev.host_path(f"{dev.home}/.edgekit/apps/{APP}/releases")
    assert {p.name for p in releases.iterdir()} == {live}


def test_an_artifact_that_fails_validation_on_the_device_leaves_current_unchanged(
        device, write_recipe, tmp_path):
    dev, keys = device
    live = current_of(dev)
    assert live, "runs after the first install"
    bundle = tmp_path / "wrong"
    shutil.copytree(build(write_recipe, "linear_softmax", "first"), bundle)
    tamper_golden_output(bundle)      # signed again: only the numerics are wrong
    sign_bundle(bundle)
    wrong = export(bundle, keys / "ours.pem", tmp_path / "wrong.mender")
    assert wrong["release"] != live

    code, log = mender(dev, "install", put(dev, tmp_path / "wrong.mender"))
    assert code != 0, log
    assert "failed its on-device steps" in log
    assert current_of(dev) == live
    assert journal_of(dev)[-1] == ("rejected", wrong["release"])
    assert mender(dev, "commit")[0] == 2          # nothing to commit: the install failed


def test_a_failing_health_hook_rolls_back_to_the_previous_release(device, write_recipe,
                                                                   tmp_path):
    dev, keys = device
    live = current_of(dev)
    assert live, "runs after the first install"
    live_name = artifact_name(dev)
    second = export(build(write_recipe, "conv_mean", "second"), keys / "ours.pem",
                    tmp_path / "second.mender")
    hook_flag = dev.host_path(f"{dev.home}/fail-health")
    hook_flag.touch()
    try:
        code, log = mender(dev, "install", put(dev, tmp_path / "second.mender"))
        assert code == 0, log
        assert journal_of(dev)[-1] == ("validated", second["release"])
        code, log = mender(dev, "commit")
    finally:
        hook_flag.unlink()
    assert code != 0, log
    assert current_of(dev) == live
    assert journal_of(dev)[-4:] == [("activate", second["release"]),
                                    ("health-failed", second["release"]),
                                    ("activate", live), ("rollback", live)]
    assert artifact_name(dev) == live_name


@pytest.mark.parametrize("signed_by", [None, "other"])
def test_an_unsigned_or_wrongly_signed_artifact_is_refused_before_the_module_runs(
        device, write_recipe, tmp_path, signed_by):
    dev, keys = device
    live = current_of(dev)
    before = journal_of(dev)
    bundle = build(write_recipe, "conv_mean", "second")
    out = tmp_path / "bad.mender"
    if signed_by:
        export(bundle, keys / f"{signed_by}.pem", out)
    else:            # what anyone without our key can make: the same payload, unsigned
        with tempfile.TemporaryDirectory() as scratch, load_bundle(bundle) as loaded:
            payload = write_payload(loaded, Path(scratch) / "payload")
            packed = Path(scratch) / PAYLOAD
            pack_payload(payload.directory, packed)
            meta = Path(scratch) / "meta.json"
            meta.write_text(json.dumps({"edgekit": 1, "app": APP, "release": payload.release}))
            subprocess.run(["mender-artifact", "write", "module-image", "-T", "edgekit",
                            "-t", "edgekit-lab", "-n", "unsigned", "-f", str(packed),
                            "-m", str(meta), "-o", str(out)], check=True, capture_output=True)
    code, log = mender(dev, "install", put(dev, out))
    assert code != 0
    assert ("invalid signature" if signed_by else "expecting signed artifact") in log, log
    assert current_of(dev) == live and journal_of(dev) == before
