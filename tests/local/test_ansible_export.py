"""`edgekit fleet export-ansible` with hostile fleet and recipe values: nothing in them becomes
an Ansible variable or a Jinja expression (issue 17, item 5). Real ansible-inventory and
ansible-playbook read the export; the hooks run on this machine over Ansible's local
connection."""

import json
import os
import subprocess
import sys

import pytest

from edgekit.errors import ConfigError
from edgekit.fleet.ansible_export import export_ansible
from tests.local.conftest import RECIPE

pytestmark = pytest.mark.local

INJECTION = "/k ansible_ssh_common_args=-oProxyCommand=./evil.sh"


def fleet_file(tmp_path, identity: str, hooks: str = ""):
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


def test_inventory_values_stay_values_and_hooks_reach_the_shell_as_text(tmp_path, v1):
    home = tmp_path / "controller-home"
    home.mkdir()
    lookup = "{{ lookup('pipe', 'touch " + str(tmp_path / "pwned") + "') }}"
    jinja = "{% if true %}evaluated{% endif %}"
    hooks = "hooks: " + json.dumps({"after_activate": f'echo "{lookup}" > hook.txt',
                                    "health": f'echo "{jinja} $EDGEKIT_RELEASE" > health.txt'})
    fleet = fleet_file(tmp_path, "~/.ssh/fleet_ed25519", hooks)
    out = tmp_path / "out"
    written = export_ansible(fleet, RECIPE, out, build_for=lambda target: v1)
    env = {**os.environ, "HOME": str(home), "ANSIBLE_NOCOLOR": "1"}

    listed = subprocess.run(["ansible-inventory", "-i", str(written.inventory), "--list"],
                            cwd=out, capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stderr
    hostvars = json.loads(listed.stdout)["_meta"]["hostvars"]["d1"]
    assert set(hostvars) == {"ansible_host", "ansible_port", "ansible_user",
                             "ansible_ssh_private_key_file", "edgekit_release",
                             "edgekit_release_src"}
    assert hostvars["ansible_ssh_private_key_file"] == \
        os.path.expanduser("~/.ssh/fleet_ed25519")

    check = subprocess.run(["ansible-playbook", "--syntax-check", written.playbook.name],
                           cwd=out, capture_output=True, text=True, timeout=120, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    # the two hook tasks for real, on this machine (Ansible's local connection; `~` = home)
    run = subprocess.run(["ansible-playbook", written.playbook.name, "-c", "local",
                          "--start-at-task", "after_activate hook",
                          "-e", f"ansible_python_interpreter={sys.executable}"],
                         cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert (home / "hook.txt").read_text() == lookup + "\n"
    release = hostvars["edgekit_release"]
    assert (home / "health.txt").read_text() == f"{jinja} {release}\n"
    assert not (tmp_path / "pwned").exists()


def test_the_printed_command_reads_the_exports_config_from_any_directory(tmp_path, v1):
    """Run from elsewhere, `ansible-playbook -i … rollout.yml` alone ignores rollout/ansible.cfg
    (and with it the pinned known_hosts: "Host key verification failed"); the printed command
    names it."""
    written = export_ansible(fleet_file(tmp_path, "~/.ssh/k"), RECIPE, tmp_path / "rollout",
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
