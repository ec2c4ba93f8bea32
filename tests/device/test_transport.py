"""SSH failures each get their own error and exit code; host keys are pinned."""

import shutil
import subprocess
from pathlib import Path

import pytest

from edgekit.config.devices import resolve_device
from edgekit.config.paths import known_hosts_path
from edgekit.errors import AuthFailed, DeviceUnreachable, HostKeyChanged, HostKeyUnknown
from edgekit.config.address import parse_address
from edgekit.transport.ssh import connect
from tests.integration.helpers import edgekit


@pytest.fixture
def saved_known_hosts():
    path = known_hosts_path()
    backup = path.read_bytes()
    yield path
    path.write_bytes(backup)


def auth_attempts(device) -> int:
    log = Path(device.config_dir) / "sshd.log"
    text = log.read_text() if log.exists() else ""
    return sum(text.count(s) for s in ("Accepted publickey", "Failed publickey",
                                       "Postponed publickey"))


def test_a_changed_host_key_is_refused_before_authentication(x86_device, saved_known_hosts,
                                                              tmp_path):
    other = tmp_path / "other_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key_b64 = (other.with_suffix(".pub")).read_text().split()[:2]
    name = parse_address(x86_device.address).known_hosts_name
    lines = [ln for ln in saved_known_hosts.read_text().splitlines()
             if not ln.startswith(name + " ")]
    saved_known_hosts.write_text("\n".join(lines + [f"{name} {key_type} {key_b64}"]) + "\n")
    before = auth_attempts(x86_device)
    address, key = resolve_device(x86_device.name)
    with pytest.raises(HostKeyChanged) as err:
        connect(address, key)
    assert err.value.got != err.value.expected and err.value.exit_code == 13
    assert auth_attempts(x86_device) == before  # our key was never offered
    proc = edgekit("probe", x86_device.name)
    assert proc.returncode == 13 and "CHANGED" in proc.stderr


def test_an_unknown_host_key_is_refused_and_trust_pins_it(x86_device, saved_known_hosts):
    name = parse_address(x86_device.address).known_hosts_name
    saved_known_hosts.write_text("".join(ln + "\n" for ln in saved_known_hosts.read_text()
                                         .splitlines() if not ln.startswith(name + " ")))
    address, key = resolve_device(x86_device.name)
    with pytest.raises(HostKeyUnknown):
        connect(address, key)
    pub = (Path(x86_device.config_dir) / "ssh_host_ed25519_key.pub")
    fingerprint = subprocess.run(["ssh-keygen", "-lf", str(pub)], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    wrong = edgekit("devices", "trust", x86_device.name, "--fingerprint", "SHA256:nope")
    assert wrong.returncode == 2
    trusted = edgekit("devices", "trust", x86_device.name, "--fingerprint", fingerprint)
    assert trusted.returncode == 0, trusted.stderr
    with connect(address, key) as conn:
        assert conn.run(["true"]).returncode == 0


def test_an_unreachable_device_and_a_refused_key_get_their_own_errors(x86_device, tmp_path):
    _, key = resolve_device(x86_device.name)
    with pytest.raises(DeviceUnreachable) as err:
        connect(parse_address("nobody@127.0.0.254:2222"), key, attempts=1)
    assert err.value.exit_code == 10
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
                   check=True)
    with pytest.raises(AuthFailed) as err:
        connect(parse_address(x86_device.address), stranger)
    assert err.value.exit_code == 11


def test_lab_status_lists_running_devices(lab_devices):
    proc = edgekit("lab", "status", "--json")
    names = {d["name"]: d["running"] for d in __import__("json").loads(proc.stdout)}
    assert all(names[d.name] for d in lab_devices.values())
    assert shutil.which("ssh-keygen")


def test_two_thousand_pinned_keys_connect_as_fast_as_one(x86_device, saved_known_hosts):
    """Pinned keys are looked up, not re-read per connection (paramiko's reader took 1.24 s
    per connection at 2,000 keys)."""
    import time
    address, key = resolve_device(x86_device.name)

    def connect_s() -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            with connect(address, key) as conn:
                conn.run(["true"])
            times.append(time.perf_counter() - started)
        return sorted(times)[1]

    alone = connect_s()
    own = saved_known_hosts.read_text()
    blob = own.split()[2]
    saved_known_hosts.write_text(own + "".join(f"[10.9.{i // 250}.{i % 250}]:22 ssh-ed25519 "
                                               f"{blob}\n" for i in range(2000)))
    crowded = connect_s()
    assert crowded < alone * 1.5 + 0.1, (alone, crowded)
