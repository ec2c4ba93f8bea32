"""$EDGEKIT_HOME holds fleet journals (hook commands), lab keys and pinned host keys: only its
owner may read it (issue 17, item 12)."""

import os
import stat
import subprocess

from tests.fixtures.cli import edgekit_here


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def edgekit(*args: str, home) -> subprocess.CompletedProcess:
    return edgekit_here(*args, env={"EDGEKIT_HOME": str(home)})


def test_a_new_home_is_created_private(tmp_path):
    home = tmp_path / "state" / "edgekit"
    proc = edgekit("devices", "list", home=home)
    assert proc.returncode == 0, proc.stderr
    assert mode(home) == 0o700


def test_a_home_an_older_edgekit_left_readable_is_tightened_with_everything_in_it(tmp_path):
    home = tmp_path / "edgekit"
    journal = home / "fleet" / "demo" / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"hook": "curl -H \'Authorization: secret\' ..."}\n')
    for path, bits in ((home, 0o755), (home / "fleet", 0o755), (journal.parent, 0o775),
                       (journal, 0o644)):
        os.chmod(path, bits)
    proc = edgekit("devices", "list", home=home)
    assert proc.returncode == 0, proc.stderr
    assert [mode(p) for p in (home, home / "fleet", journal.parent, journal)] == \
        [0o700, 0o700, 0o700, 0o600]


def test_the_log_of_an_unexpected_error_is_private(tmp_path):
    home = tmp_path / "edgekit"
    home.mkdir()
    (home / "devices.json").write_text("{not json")
    proc = edgekit("devices", "list", home=home)
    assert proc.returncode == 1
    (log,) = (home / "logs").iterdir()
    assert mode(home) == 0o700 and mode(home / "logs") == 0o700
