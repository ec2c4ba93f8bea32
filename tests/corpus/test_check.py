"""`edgekit check` on a real architecture that lowers whole: one pass, as a build, no op cut out."""

import json

from tests.corpus.models import CORPUS
from tests.integration.helpers import edgekit


def test_check_of_a_resnet_that_lowers_whole_cuts_no_op_out(tmp_path):
    resnet = next(e for e in CORPUS if e.name == "resnet")
    proc = edgekit("check", resnet.python, "--json", cwd=tmp_path,
                   env={"EDGEKIT_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("check: ")]
    assert progress[1:] == ["check: whole model: tosa"]  # no per-op work
    ops = {o["op"]: o for o in report["ops"]}
    assert report["chosen"] == "tosa" and report["failures"] == {}
    assert ops["aten::max_pool2d_with_indices"]["tosa"] is True
    assert all(o["imported"] and o["tosa"] and o["compiled"] and not o["failure"]
               for o in ops.values())
    assert not any("getitem" in name for name in ops)
