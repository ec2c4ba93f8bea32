"""torch.compile(backend="edgekit"): real dynamo graphs through torch-mlir and IREE."""

import os
import subprocess
import sys

import pytest
import torch

import edgekit.compile as ec
import edgekit.config
from edgekit.examples.models import kws_mlp, text_encoder


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    torch._dynamo.reset()
    for name in edgekit.config.COMPILE_SETTINGS:
        monkeypatch.setattr(edgekit.config, name, getattr(edgekit.config, name))
    yield
    torch._dynamo.reset()


def arithmetic(x, y):
    return torch.tanh(x * y + 1.5) / (1 + y.abs())


def with_graph_break(x):
    y = torch.relu(x @ x.T)
    print("a graph break")  # dynamo splits the function here
    return y.softmax(-1) + x.sum()


def test_a_function_with_arithmetic_matches_eager():
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    compiled = torch.compile(arithmetic, backend="edgekit", options={"target": "host"})
    result, codes = ec.run_and_get_code(compiled, x, y)
    torch.testing.assert_close(result, arithmetic(x, y))
    assert len(codes) == 1 and codes[0].target == "host"


@pytest.mark.parametrize("factory", [kws_mlp, text_encoder])
def test_example_models_match_eager(factory):
    model, (x,) = factory()
    compiled = torch.compile(model, backend="edgekit", options={"target": "host"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def test_a_graph_break_gives_two_graphs_and_the_same_result():
    x = torch.randn(3, 3)
    compiled = torch.compile(with_graph_break, backend="edgekit")
    result, codes = ec.run_and_get_code(compiled, x)
    torch.testing.assert_close(result, with_graph_break(x), atol=1e-5, rtol=1e-5)
    assert len({c.graph for c in codes}) == 2


def test_new_shapes_recompile_and_stay_correct():
    compiled = torch.compile(arithmetic, backend="edgekit")
    for rows in (2, 3, 5, 3):
        x, y = torch.randn(rows, 4), torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x, y), arithmetic(x, y))


def test_changed_weights_give_a_new_variant_not_stale_results():
    model, (x,) = kws_mlp()
    compiled = torch.compile(model, backend="edgekit")
    with torch.no_grad():
        before = compiled(x)
        model.net[-1].bias.add_(1.0)  # in place: same parameter object, new version
        torch.testing.assert_close(compiled(x), before + 1.0, atol=1e-4, rtol=1e-4)


def test_the_code_helper_shows_fx_mlir_per_stage_and_the_wrapper_that_runs():
    compiled = torch.compile(arithmetic, backend="edgekit", options={"lowering": "linalg"})
    _, codes = ec.run_and_get_code(compiled, torch.randn(2, 2), torch.randn(2, 2))
    code = codes[0]
    assert "tanh" in code.fx_code
    assert set(code.mlir) == {"torch", "linalg"}
    assert "torch.aten.tanh" in code.mlir["torch"] and "linalg" in code.mlir["linalg"]
    assert "def call(args):" in code.wrapper and "runner.run" in code.wrapper
    assert code.lowering == "linalg" and os.path.exists(code.module)


def test_edgekit_config_attributes_choose_the_lowering():
    edgekit.config.lowering = "linalg"
    compiled = torch.compile(arithmetic, backend="edgekit")
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    result, codes = ec.run_and_get_code(compiled, x, y)
    torch.testing.assert_close(result, arithmetic(x, y))
    assert codes[0].lowering == "linalg"


def test_options_override_edgekit_config():
    edgekit.config.lowering = "linalg"
    compiled = torch.compile(arithmetic, backend="edgekit", options={"lowering": "torch"})
    _, codes = ec.run_and_get_code(compiled, torch.randn(2, 3), torch.randn(2, 3))
    assert codes[0].lowering == "torch"


def test_environment_variables_configure_a_fresh_process(tmp_path):
    script = (
        "import torch, edgekit.compile as ec\n"
        "f = torch.compile(lambda x: x * 2 + 1, backend='edgekit')\n"
        "x = torch.randn(3)\n"
        "r, codes = ec.run_and_get_code(f, x)\n"
        "assert torch.allclose(r, x * 2 + 1)\n"
        "print(codes[0].target, codes[0].lowering)\n")
    env = {**os.environ, "EDGEKIT_TARGET": "host", "EDGEKIT_LOWERING": "linalg"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["host", "linalg"]


def test_unknown_options_and_values_are_clear_errors():
    x = torch.randn(2)
    expected = "(?s)unknown torch.compile option 'targte'.*expected one of: target, lowering"
    with pytest.raises(Exception, match=expected):
        torch.compile(lambda t: t + 1, backend="edgekit", options={"targte": "host"})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="options.lowering"):
        torch.compile(lambda t: t + 2, backend="edgekit", options={"lowering": "spirv"})(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown target 'rpi9'"):
        torch.compile(lambda t: t + 3, backend="edgekit", options={"target": "rpi9"})(x)
