"""`edgekit fleet export-ansible`: hostile fleet and recipe values stay values (issue 17, item
5), the whole playbook run for real with `ansible-playbook -c local` (this machine's home as
the device: the same steps, shims and runtime as over SSH), `--out` that refuses to overwrite
what edgekit did not write, and `check-outputs` reading a device's outputs archive (issue 34).
"""

import io
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from edgekit.device.deploy import deploy_bundle
from edgekit.device.layout import app_dir, shims_dir
from edgekit.device.provision import shim_version
from edgekit.errors import ConfigError
from edgekit.fleet.ansible_export import MARKER, STEPS, _octal, export_ansible
from edgekit.fleet.outputs_check import check_outputs
from tests.local.conftest import APP, RECIPE, current_of, device_journal

pytestmark = pytest.mark.local

INJECTION = "/k ansible_ssh_common_args=-oProxyCommand=./evil.sh"


def fleet_file(tmp_path, identity: str = "~/.ssh/k", hooks: str = ""):
    path = tmp_path / "fleet.yaml"
    path.write_text("devices:\n"
                    f"  d1: {{host: 192.0.2.11, user: pi, target: host, identity: {identity!r}}}\n"
                    "rollout: {canary: 1, waves: [100%]}\n" + hooks)
    return path


@pytest.mark.parametrize("identity", [INJECTION, "/k=v", "/keys/{{ lookup('env','HOME') }}",
                                      "/k\tx", '/k"x'])
def test_an_identity_that_could_inject_into_the_inventory_is_refused(tmp_path, v1, identity):
    fleet = fleet_file(tmp_path, identity)
    with pytest.raises(ConfigError) as err:
        export_ansible(fleet, RECIPE, tmp_path / "out", build_for=lambda target: v1)
    assert err.value.exit_code == 2 and err.value.key == "devices.d1.identity"
    assert "cannot be written to an Ansible inventory" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_the_playbook_deploys_journals_validation_and_runs_hooks_as_text(tmp_path, v1):
    home = tmp_path / "controller-home"
    home.mkdir()
    lookup = "{{ lookup('pipe', 'touch " + str(tmp_path / "pwned") + "') }}"
    jinja = "{% if true %}evaluated{% endif %}"
    hooks = "hooks: " + json.dumps({"after_activate": f'echo "{lookup}" > hook.txt',
                                    "health": f'echo "{jinja} $EDGEKIT_RELEASE" > health.txt'})
    out = tmp_path / "out"
    written = export_ansible(fleet_file(tmp_path, "~/.ssh/fleet_ed25519", hooks), RECIPE, out,
                             build_for=lambda target: v1)
    env = {**os.environ, "HOME": str(home), "ANSIBLE_NOCOLOR": "1"}

    listed = subprocess.run(["ansible-inventory", "-i", str(written.inventory), "--list"],
                            cwd=out, capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    hostvars = json.loads(listed.stdout)["_meta"]["hostvars"]["d1"]
    assert set(hostvars) == {"ansible_host", "ansible_port", "ansible_user",
                             "ansible_ssh_private_key_file", "edgekit_release",
                             "edgekit_release_src", "edgekit_samples"}
    assert hostvars["ansible_ssh_private_key_file"] == \
        os.path.expanduser("~/.ssh/fleet_ed25519")
    assert hostvars["edgekit_samples"] == 1 + len(v1.manifest.more_golden)

    # the whole playbook on this machine (Ansible's local connection; `~` = home)
    run = subprocess.run(["ansible-playbook", written.playbook.name, "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    release = hostvars["edgekit_release"]
    assert current_of(home) == release
    # what `edgekit deploy` journals, so `edgekit fleet status` shows the validation
    assert device_journal(home) == [("validated", release), ("activate", release)]
    assert (home / "hook.txt").read_text() == lookup + "\n"
    assert (home / "health.txt").read_text() == f"{jinja} {release}\n"
    assert not (tmp_path / "pwned").exists()
    leftovers = {p.name for p in (home / ".edgekit" / "apps" / APP).iterdir()}
    assert leftovers == {"current", "journal.jsonl", "releases"}
    assert not (home / ".edgekit" / ".incoming-ansible").exists()

    # run again: nothing is sent (runtime and release verified in place), validated again
    again = subprocess.run(["ansible-playbook", written.playbook.name, "-c", "local", "-v",
                            "-e", f"ansible_python_interpreter={sys.executable}"],
                           cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stdout[-3000:]
    assert again.stdout.count("skipping: [d1]") == 2     # the two archives
    assert device_journal(home)[2:] == [("validated", release)]


def test_the_printed_command_reads_the_exports_config_from_any_directory(tmp_path, v1):
    """Run from elsewhere, `ansible-playbook -i … rollout.yml` alone ignores rollout/ansible.cfg
    (and with it the pinned known_hosts: "Host key verification failed"); the printed command
    names it."""
    written = export_ansible(fleet_file(tmp_path), RECIPE, tmp_path / "rollout",
                             build_for=lambda target: v1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dump = subprocess.run(written.command().replace("ansible-playbook -i", "ansible-config dump "
                                                    "--only-changed #", 1),
                          shell=True, cwd=elsewhere, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert dump.returncode == 0, dump.stderr
    assert f"CONFIG_FILE() = {written.config}" in dump.stdout
    check = subprocess.run(written.command() + " --syntax-check", shell=True, cwd=elsewhere,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("foreign", ["files/notes.txt", "rollout.yml", "files"])
def test_out_refuses_to_overwrite_files_edgekit_did_not_write(tmp_path, v1, foreign):
    out = tmp_path / "out"
    (out / foreign).parent.mkdir(parents=True, exist_ok=True)
    (out / foreign).write_text("mine\n")
    with pytest.raises(ConfigError) as err:
        export_ansible(fleet_file(tmp_path), RECIPE, out, build_for=lambda target: v1)
    assert err.value.exit_code == 2 and err.value.key == "--out"
    assert foreign in str(err.value) and "refusing to overwrite" in str(err.value)
    assert err.value.hint and "\n" not in err.value.what
    assert (out / foreign).read_text() == "mine\n" and not (out / MARKER).exists()


def test_out_replaces_its_own_export_and_nothing_a_user_changed(tmp_path, v1, v2):
    out = tmp_path / "out"
    (out / "outputs" / "d1").mkdir(parents=True)       # what a playbook run fetched: left be
    (out / "outputs" / "d1" / "x.tar").write_text("run\n")
    (out / "README.txt").parent.mkdir(parents=True, exist_ok=True)
    (out / "README.txt").write_text("my notes\n")      # beside the export: left be
    fleet = fleet_file(tmp_path)
    export_ansible(fleet, RECIPE, out, build_for=lambda target: v1)
    listed = json.loads((out / MARKER).read_text())["files"]
    assert {"rollout.yml", "inventory.yml", "ansible.cfg"} <= set(listed)
    assert all(not p.startswith(("outputs/", "README")) for p in listed)

    export_ansible(fleet, RECIPE, out, build_for=lambda target: v2)   # its own: replaced
    assert (out / "outputs" / "d1" / "x.tar").read_text() == "run\n"
    assert (out / "README.txt").read_text() == "my notes\n"
    inventory = (out / "inventory.yml").read_text()
    from edgekit.device.deploy import release_id
    assert release_id(v2) in inventory and release_id(v1) not in inventory

    (out / "rollout.yml").write_text((out / "rollout.yml").read_text() + "# my change\n")
    with pytest.raises(ConfigError) as err:
        export_ansible(fleet, RECIPE, out, build_for=lambda target: v1)
    assert "rollout.yml changed since edgekit wrote it" in str(err.value)
    assert (out / "rollout.yml").read_text().endswith("# my change\n")


def _outputs_tar(path, members: dict[str, bytes], links: dict[str, str] = {}):
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return path


def _npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_check_outputs_compares_every_sample_and_reads_only_expected_names(tmp_path, v1):
    m = v1.manifest
    sets = [m.golden_outputs, *(s.outputs for s in m.more_golden)]
    right = {f"./sample_{k}/output_0.npy": v1.file(golden[0]).read_bytes()
             for k, golden in enumerate(sets)}
    device = tmp_path / "d1"
    device.mkdir()
    ok = check_outputs(v1.path, _outputs_tar(device / "ok.tar", right))
    assert ok.ok and ok.samples == len(sets) and ok.where == "d1"

    # the last sample wrong: found (sample 0 alone would pass)
    last = f"./sample_{len(sets) - 1}/output_0.npy"
    wrong = {**right, last: _npy(np.load(v1.file(sets[-1][0])) + 1.0)}
    bad = check_outputs(v1.path, _outputs_tar(device / "bad.tar", wrong))
    assert not bad.ok and f"sample {len(sets) - 1}" in " ".join(bad.outputs[0].problems)

    # hostile names and links are never written; a failed run's stderr is reported
    hostile = {**right, "../../escaped": b"x", "/abs": b"x"}
    del hostile[last]
    hostile[f"sample_{len(sets) - 1}.err"] = b"iree-run-module: INVALID_ARGUMENT oops\n"
    report = check_outputs(v1.path, _outputs_tar(device / "hostile.tar", hostile,
                                                 links={last: "/etc/passwd"}))
    assert not report.ok
    assert "iree-run-module failed on the device: iree-run-module: INVALID_ARGUMENT oops" in \
        report.outputs[0].problems[0]
    assert not (tmp_path / "escaped").exists() and not list(tmp_path.glob("**/abs"))

    (device / "torn.tar").write_bytes((device / "ok.tar").read_bytes()[:700])
    torn = check_outputs(v1.path, device / "torn.tar")
    assert not torn.ok


def test_the_switch_step_prunes_releases_as_edgekit_deploy_does(tmp_path):
    """`current`, the rollback target and the newest KEEP activated releases stay; the real
    activate shim journals each switch."""
    from edgekit.device.probe import SHIMS
    from edgekit.fleet.ansible_export import KEEP_RELEASES, STEPS
    home = tmp_path / "home"
    app = ".edgekit/apps/a"
    shims = home / ".edgekit" / "shims" / "s"
    shims.mkdir(parents=True)
    for shim in SHIMS.glob("*.sh"):
        (shims / shim.name).write_bytes(shim.read_bytes())
    names = [f"r{i}" for i in range(1, 6)]
    for name in names:
        (home / app / "releases" / name).mkdir(parents=True)
    env = {**os.environ, "HOME": str(home)}
    for name in ["r1", "r2", "r1", "r3", "r4"]:      # r1 twice: counted by its last activation
        subprocess.run(["sh", str(shims / "activate.sh"), app, name], cwd=home, env=env,
                       check=True)
    switch = subprocess.run(["sh", str(STEPS / "switch.sh"), app, ".edgekit/shims/s", "10",
                             str(KEEP_RELEASES), "", "", "r5", "r4"], cwd=home, env=env,
                            capture_output=True, text=True)
    assert switch.returncode == 0, switch.stderr
    assert current_of(home, "a") == "r5"
    assert {p.name for p in (home / app / "releases").iterdir()} == {"r5", "r4", "r3"}
    assert device_journal(home, "a")[-2:] == [("validated", "r5"), ("activate", "r5")]


def step(device, name, *args):
    """One of the playbook's device-side steps, run as Ansible's `script` runs it: sh, in $HOME."""
    env = {**os.environ, "HOME": str(device.root)}
    return subprocess.run(["sh", str(STEPS / name), *args], capture_output=True, text=True,
                          cwd=device.root, timeout=120, env=env)


def test_a_failing_health_hook_in_the_playbooks_switch_puts_the_previous_release_back(
        make_device, v1, v2):
    device = make_device()
    old, new = deploy_bundle(device, v1), deploy_bundle(device, v2)
    result = step(device, "switch.sh", app_dir(APP), shims_dir(shim_version()), "20", "3", "",
                  _octal("echo unhealthy >&2; exit 3"), old.release, new.release)
    assert result.returncode == 1
    assert f"health hook exited with 3; `current` is back on {new.release}" in result.stderr
    assert current_of(device.root) == new.release
    assert device_journal(device.root)[-5:] == [
        ("validated", old.release), ("activate", old.release), ("health-failed", old.release),
        ("activate", new.release), ("rollback", new.release)]


def test_the_playbooks_rescue_puts_the_previous_release_back_and_journals_the_rejection(
        make_device, v1, v2):
    device = make_device()
    old, new = deploy_bundle(device, v1), deploy_bundle(device, v2)
    result = step(device, "rescue.sh", app_dir(APP), shims_dir(shim_version()), new.release,
                  old.release, "yes")
    assert result.returncode == 0, result.stderr
    assert current_of(device.root) == old.release
    assert device_journal(device.root)[-3:] == [
        ("rejected", new.release), ("activate", old.release), ("rollback", old.release)]
    # the rejected release stays: it is the rollback target now
    assert (device.root / app_dir(APP) / "releases" / new.release).is_dir()
