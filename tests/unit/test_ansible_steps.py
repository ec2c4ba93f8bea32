"""The exported playbook's device-side steps (edgekit/fleet/ansible_steps): they parse as POSIX
sh, and a hook command reaches the device byte for byte through its octal form."""

import subprocess

import pytest

from edgekit.fleet.ansible_export import STEPS, _octal


@pytest.mark.parametrize("step", sorted(p.name for p in STEPS.glob("*.sh")))
def test_each_device_side_step_parses_as_posix_sh(step):
    assert subprocess.run(["sh", "-n", str(STEPS / step)], capture_output=True).returncode == 0


@pytest.mark.parametrize("command", [
    'echo "{{ lookup(\'pipe\', \'id\') }}" > hook.txt', "{% raw %}x{% endraw %} $HOME `id`",
    "printf '%s\\n' \"a b\" && systemctl --user restart detector", "éü — ✓", "a\nb", ""])
def test_a_hook_command_survives_its_octal_form_byte_for_byte(command):
    encoded = _octal(command)
    assert set(encoded) <= set("\\01234567")
    decoded = subprocess.run(["sh", "-c", 'printf %b "$1"', "sh", encoded], capture_output=True)
    assert decoded.stdout == command.encode()
