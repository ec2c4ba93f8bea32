"""runs.sh (the accuracy gates' batches of runs) refuses arguments that are not what the host
sends — a number where a number goes, a known mode — before it runs anything."""

import pytest

from tests.shims.test_shims import sh


@pytest.mark.parametrize("args, said", [
    (("repeat", "1;reboot", "3"), "sample must be a number"),
    (("repeat", "0", "-1"), "R must be a number"),
    (("dataset", "/in", "0", "x", "1"), "COUNT must be a number"),
    (("replay", "0", "1"), "mode is repeat or dataset"),
])
def test_runs_sh_refuses_what_the_host_never_sends(tmp_path, args, said):
    done = sh("runs.sh", tmp_path / "runtime", tmp_path / "release", tmp_path / "out", *args)
    assert done.returncode == 2 and said in done.stderr
    assert not (tmp_path / "out").exists()
