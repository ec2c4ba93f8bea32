"""The device-side shims, run here with /bin/sh on plain files (on a real release with the real
IREE runtime tools: tests/local/test_shims_on_a_release.py)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

SHIMS = Path(__file__).resolve().parents[2] / "runtime_shims"


def sh(script: str, *args, cwd=None, home=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home)} if home else None
    return subprocess.run(["sh", str(SHIMS / script), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env=env)


@pytest.mark.parametrize("script", sorted(p.name for p in SHIMS.glob("*.sh")))
def test_every_shim_is_plain_posix_sh(script):
    assert subprocess.run(["sh", "-n", str(SHIMS / script)]).returncode == 0
    text = (SHIMS / script).read_text()
    assert "python" not in text and "bash" not in text.splitlines()[0]


def test_probe_prints_what_this_machine_is(tmp_path):
    out = sh("probe.sh", tmp_path / ".edgekit").stdout
    facts = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert facts["arch"] == os.uname().machine
    assert int(facts["cores"]) >= 1 and int(facts["free_kb"]) > 0
    assert facts["glibc"].startswith("2.")


def test_activate_switches_current_by_rename_and_journals_it(tmp_path):
    app = tmp_path / "app"
    (app / "releases" / "one").mkdir(parents=True)
    (app / "releases" / "two").mkdir()
    assert sh("activate.sh", app, "one").returncode == 0
    assert os.readlink(app / "current") == "releases/one"
    assert sh("activate.sh", app, "two").returncode == 0
    assert os.readlink(app / "current") == "releases/two"
    events = [json.loads(line) for line in (app / "journal.jsonl").read_text().splitlines()]
    assert [e["release"] for e in events] == ["one", "two"]
    missing = sh("activate.sh", app, "three")
    assert missing.returncode == 3 and os.readlink(app / "current") == "releases/two"
    assert not list(app.glob(".current.*"))  # no temporary link left behind


def test_verify_accepts_intact_files_and_names_a_changed_one(tmp_path):
    (tmp_path / "module.vmfb").write_text("alpha")
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "b.npy").write_text("beta")
    sums = subprocess.run(["sha256sum", "module.vmfb", "golden/b.npy"], cwd=tmp_path,
                          capture_output=True, text=True).stdout
    (tmp_path / "SHA256SUMS").write_text(sums)
    assert sh("verify.sh", tmp_path, "--allow-unsigned").returncode == 0
    (tmp_path / "golden" / "b.npy").write_text("BETA")
    bad = sh("verify.sh", tmp_path, "--allow-unsigned")
    assert bad.returncode == 1 and "golden/b.npy: FAILED" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
