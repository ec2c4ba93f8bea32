"""The libraries that replaced hand-written code do what it did: fingerprints as OpenSSH
shows them (paramiko's, and ssh-keygen's for key types paramiko cannot load), and filelock's
locks held across real processes."""

import base64
import hashlib
import os
import subprocess
import sys
import textwrap
import time

import paramiko
import pytest

from edgekit.device.trust import signer_fingerprint_of
from edgekit.errors import ConfigError
from edgekit.fleet.journal import exclusive
from edgekit.toolchain.signing import key_fingerprint
from edgekit.transport.known_hosts import parse
from edgekit.transport.ssh import fingerprint

pytestmark = pytest.mark.unit
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ssh_keygen_fingerprint(public_file) -> str:
    return subprocess.run(["ssh-keygen", "-l", "-f", str(public_file)], capture_output=True,
                          text=True, check=True).stdout.split()[1]


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_host_and_signer_fingerprints_are_the_ones_ssh_keygen_shows(tmp_path, kind):
    key = tmp_path / kind
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True)
    key_type, blob = (key.with_suffix(".pub")).read_text().split()[:2]
    expected = ssh_keygen_fingerprint(key.with_suffix(".pub"))
    assert fingerprint(paramiko.PKey.from_type_string(key_type, base64.b64decode(blob))) \
        == expected
    assert signer_fingerprint_of(f'ci namespaces="edgekit-bundle" {key_type} {blob}') \
        == expected


def test_a_security_key_signer_paramiko_cannot_load_still_gets_its_fingerprint():
    def string(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data
    kind = b"sk-ssh-ed25519@openssh.com"
    blob = string(kind) + string(bytes(range(32))) + string(b"ssh:")
    line = f"ci {kind.decode()} {base64.b64encode(blob).decode()}"
    with pytest.raises(paramiko.pkey.UnknownKeyType):
        paramiko.PKey.from_type_string(kind.decode(), blob)
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert signer_fingerprint_of(line) == key_fingerprint(line.split(None, 1)[1]) \
        == f"SHA256:{digest}"
    assert key_fingerprint("ssh-ed25519 not-base64") == ""


def test_a_rollout_driven_by_another_process_is_refused_until_that_process_ends(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from edgekit.fleet.journal import exclusive
            with exclusive(Path({str(tmp_path)!r})):
                print("held", flush=True)
                sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="being driven by another edgekit process"):
            with exclusive(tmp_path):
                pass
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    with exclusive(tmp_path):                   # released with the process
        pass


def test_processes_pinning_at_once_lose_no_pin(tmp_path):
    known_hosts = tmp_path / "known_hosts"
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from edgekit.transport.known_hosts import pin_line
        for i in range(20):
            pin_line(Path({str(known_hosts)!r}), f"[127.0.0.{{sys.argv[1]}}]:{{i}}",
                     "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAI" + "A" * 43)
    """)
    began = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", script, str(n)],
                              env={**os.environ, "PYTHONPATH": REPO}) for n in range(1, 7)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    keys = parse(known_hosts.read_text())
    assert all(keys.lookup(f"[127.0.0.{n}]:{i}") for n in range(1, 7) for i in range(20)), \
        f"pins lost in {time.monotonic() - began:.1f} s"
