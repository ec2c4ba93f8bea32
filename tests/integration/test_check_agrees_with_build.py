"""`edgekit check` says what `edgekit build` says: a model the build refuses for its golden
outputs is refused by check with the same line and exit, and an op's verdict in a lowering the
whole model failed comes from that failure (with its reproducer), not from the op compiled
alone (real torch-mlir/IREE)."""

import json

import pytest

from tests.fixtures.cli import edgekit_here
from tests.fixtures.user_models import DEAD_RELU

MODELS = DEAD_RELU + '''

class MaskBias(nn.Module):
    """BERT's extended attention mask: TOSA refuses the i64→f32 cast of the whole model at the
    `unsqueeze` (its location); that op cut out alone lowers through TOSA."""

    def forward(self, x, mask):
        bias = (1.0 - mask[:, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        return torch.softmax(x + bias, -1)


def mask_bias():
    return MaskBias().eval(), (torch.rand(2, 4, 4), torch.ones(2, 4, dtype=torch.long))
'''


@pytest.fixture()
def models(tmp_path):
    (tmp_path / "m.py").write_text(MODELS)
    return tmp_path


def _error_line(stderr: str) -> str:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    return line


def test_check_refuses_uninformative_goldens_as_the_build_does(models):
    (models / "r.yaml").write_text("name: dead\nmodel: {python: m.py:dead_relu}\n")
    env = {"EDGEKIT_CACHE_DIR": str(models / "cache")}
    build = edgekit_here("build", "--recipe", "r.yaml", "--target", "host", cwd=models, env=env)
    check = edgekit_here("check", "r.yaml", "--json", cwd=models, env=env)
    assert build.returncode == check.returncode == 8, (build.stderr, check.stderr)
    assert _error_line(check.stderr) == _error_line(build.stderr)
    assert "cannot tell a right module from a wrong one" in _error_line(check.stderr)
    report = json.loads(check.stdout)
    # it lowers, but it is not buildable: the build never gets that far
    assert report["chosen"] == "tosa" and report["buildable"] is False
    assert report["refused"] in _error_line(check.stderr)
    # a factory checked without a recipe: the same refusal, located at the factory
    bare = edgekit_here("check", "m.py:dead_relu", cwd=models, env=env)
    assert bare.returncode == 8
    assert _error_line(bare.stderr).startswith("error: m.py:dead_relu: golden output")
    assert "not buildable: a build refuses it before lowering" in " ".join(bare.stdout.split())


def test_an_op_named_in_the_whole_models_failure_fails_there_even_if_it_passes_alone(models):
    proc = edgekit_here("check", "m.py:mask_bias", "--json", cwd=models,
                        env={"EDGEKIT_CACHE_DIR": str(models / "cache")})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # the premise: the whole model fails TOSA on a cast located at the unsqueeze
    assert report["whole_model"] == {"tosa": False, "linalg": True}, report["whole_model"]
    assert "aten.unsqueeze" in report["failures"]["tosa"]
    ops = {o["op"]: o for o in report["ops"]}
    unsqueeze = ops["aten::unsqueeze"]
    assert unsqueeze["tosa"] is False and unsqueeze["linalg"] is True
    assert unsqueeze["failure"] == f"tosa (whole model): {report['failures']['tosa']}"
    repro = models / unsqueeze["reproducer"]
    assert repro.name == "tosa" and repro.parent.name == "whole-model"
    assert (repro / "reproduce.sh").is_file()
    # no op is said to pass the lowering the whole model failed in
    assert not any(o["tosa"] for o in ops.values()), ops
