"""The local transport: real processes in a directory that plays the device's home, and the
same typed errors as over SSH."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgekit.config.timeouts import Timeouts
from edgekit.device.probe import probe
from edgekit.errors import DeviceUnreachable, RemoteCommandFailed
from edgekit.transport import open_device
from edgekit.transport.local import LocalTransport

pytestmark = pytest.mark.local
REPO = Path(__file__).resolve().parents[2]


def test_commands_run_as_real_processes_in_the_devices_home(make_device):
    device = make_device()
    result = device.run(["sh", "-c", 'echo "$HOME"; pwd; echo "$0" >&2', "ok"])
    assert result.text.splitlines() == [str(device.root)] * 2 and result.stderr == b"ok\n"
    assert device.run(["false"], check=False).returncode == 1
    with pytest.raises(RemoteCommandFailed) as err:
        device.run(["sh", "-c", "echo broken >&2; exit 7"], what="the step failed")
    assert (err.value.returncode, err.value.where) == (7, device.where)
    assert "broken" in err.value.stderr_tail


def test_a_command_past_its_timeout_is_killed_with_everything_it_started(make_device):
    device = make_device()
    with pytest.raises(RemoteCommandFailed, match="timed out") as err:
        device.run(["sh", "-c", "sleep 30 & echo $! > child; wait"], timeout=1)
    assert err.value.returncode == 124
    child = Path(f"/proc/{(device.root / 'child').read_text().strip()}/stat")
    assert not child.exists() or child.read_text().split(")")[1].split()[0] == "Z"  # reaped or dead


def test_file_operations_map_home_paths_and_absence_is_an_answer(make_device, tmp_path):
    device = make_device()
    device.mkdirs(".edgekit/apps/a")
    device.append_text("~/.edgekit/apps/a/journal.jsonl", "one\n")
    device.append_text(".edgekit/apps/a/journal.jsonl", "two\n")
    assert device.read_text(".edgekit/apps/a/journal.jsonl") == "one\ntwo\n"
    assert [e.name for e in device.listdir(".edgekit/apps")] == ["a"]
    assert (device.read_text("nope"), device.readlink("nope"), device.listdir("nope")) == \
        (None, None, None)
    local = tmp_path / "x"
    local.write_bytes(b"payload")
    assert device.put(local, ".edgekit/x.partial") == 7
    device.chmod(".edgekit/x.partial", 0o755)
    device.rename(".edgekit/x.partial", ".edgekit/x")
    assert (device.root / ".edgekit" / "x").stat().st_mode & 0o777 == 0o755
    with pytest.raises(RemoteCommandFailed, match="download failed") as err:
        device.get(".edgekit/missing", tmp_path / "y", max_bytes=10)
    assert err.value.where == device.where


def test_a_device_directory_that_is_gone_is_unreachable(tmp_path):
    with pytest.raises(DeviceUnreachable):
        open_device(f"local:{tmp_path / 'gone'}")
    device = LocalTransport(tmp_path)
    device.close()
    with pytest.raises(DeviceUnreachable):
        device.run(["true"])


def test_the_probe_reports_this_machines_facts(make_device):
    info = probe(make_device())
    assert info.arch == os.uname().machine and info.cores >= 1 and info.free_kb > 0


def test_both_transports_have_every_operation_of_the_protocol():
    import inspect
    from edgekit.transport import Connection, Transport
    wanted = {name: inspect.signature(member) for name, member in vars(Transport).items()
              if callable(member) and (not name.startswith("_") or name in ("__enter__",
                                                                          "__exit__"))}
    for cls in (Connection, LocalTransport):
        for name, signature in wanted.items():
            mine = inspect.signature(getattr(cls, name))
            assert list(mine.parameters) == list(signature.parameters), (cls, name)
        assert isinstance(getattr(cls, "where"), property)


# Peak RSS from VmHWM: getrusage's ru_maxrss survives exec, so in a child of pytest it would
# report pytest's own peak.
FLOOD = """
import re, sys
from pathlib import Path
from edgekit.transport.local import LocalTransport
result = LocalTransport(Path(sys.argv[1])).run(
    ["sh", "-c", "head -c 300000000 /dev/zero; echo last line; echo err >&2"])
peak_kib = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text())[1])
print(len(result.stdout), result.stdout_cut, peak_kib // 1024,
      result.stdout.endswith(b"last line\\n"))
"""


def test_a_command_printing_300_mb_costs_edgekit_a_few_mib_and_says_what_was_cut(make_device):
    """Measured in a process of its own (its peak RSS is what the flood cost)."""
    device = make_device()
    proc = subprocess.run([sys.executable, "-c", FLOOD, str(device.root)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    kept, cut, rss_mib, tail_kept = proc.stdout.split()
    assert int(kept) < 3 << 20 and int(cut) > 290_000_000 and tail_kept == "True"
    assert int(rss_mib) < 150, f"peak RSS {rss_mib} MiB for 300 MB of output"


def test_commands_get_the_transports_default_deadline(tmp_path):
    device = LocalTransport(tmp_path, timeouts=Timeouts(command_s=1))
    with pytest.raises(RemoteCommandFailed, match="timed out after 1 s") as err:
        device.run(["sleep", "30"])
    assert err.value.returncode == 124
