"""Frontends by source kind: chosen once from the recipe's `model:`; the stages after import,
`edgekit check` and the caches never ask which kind of model it was."""

import ast
from pathlib import Path

import pytest

from edgekit.config.profiles import load_target
from edgekit.config.recipe import ModelSource
from edgekit.errors import ConfigError
from edgekit.pipeline.frontends.registry import FRONTENDS, frontend_for, frontend_named
from edgekit.pipeline.lower import ImportedGraph, LoweringSource
from edgekit.toolchain.iree import compile_flags

PIPELINE = Path(__file__).resolve().parents[2] / "edgekit" / "pipeline"
# What knows the source kind: the frontends, their quantization hooks (PT2E, ONNX QDQ), and the
# PyTorch frontend's graph rewrites.
KIND_AWARE = ("frontends", "quantize", "rewrite.py", "rewrite_softmax.py", "rewrite_int8.py",
              "rewrite_int8_matmul.py", "rewrite_int8_depthwise.py",
              "rewrite_tosa.py")
SOURCE_KIND_NAMES = ("onnx", "exportedprogram", "modelproto")  # in any identifier
# (`torch` alone is PyTorch; torch_mlir and torch_bytecode are the torch-backend dialect that
# every model is imported to)


def _source_kind_references(path: Path) -> list[str]:
    """Imports of torch/onnx/onnxruntime and names that mention a source kind (string
    constants aside: compiler diagnostics name onnx ops)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            modules = []
        found += [f"import {m}" for m in modules
                  if m.split(".")[0] in ("torch", "onnx", "onnxruntime")]
        name = (node.id if isinstance(node, ast.Name) else node.attr
                if isinstance(node, ast.Attribute) else node.arg if isinstance(node, ast.arg)
                else node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else None)
        if name == "torch" or name and any(k in name.lower() for k in SOURCE_KIND_NAMES):
            found.append(f"{name} (line {node.lineno})")
    return sorted(found)


def _stage_modules() -> list[Path]:
    # venv_scripts/: programs run inside an NPU toolchain's venv on the files they are given
    return sorted(p for p in PIPELINE.rglob("*.py")
                  if p.relative_to(PIPELINE).parts[0] not in KIND_AWARE
                  and "venv_scripts" not in p.parts)


@pytest.mark.parametrize("path", _stage_modules(), ids=lambda p: p.name)
def test_pipeline_modules_outside_the_frontends_never_ask_the_source_kind(path):
    assert _source_kind_references(path) == []


def test_the_scan_finds_what_a_source_kind_branch_looks_like(tmp_path):
    branchy = tmp_path / "branchy.py"
    branchy.write_text("import torch\n"
                       "def f(exported, recipe):\n"
                       "    if isinstance(exported.program, torch.export.ExportedProgram):\n"
                       "        return 1\n"
                       "    return recipe.model.onnx\n")
    assert _source_kind_references(branchy) == [
        "ExportedProgram (line 3)", "import torch", "onnx (line 5)", "torch (line 3)"]
    assert _stage_modules() and all(p.parent.name != "frontends" for p in _stage_modules())


@pytest.mark.parametrize("source, kind", [({"python": "m:f"}, "pytorch"),
                                          ({"exported": "m.pt2"}, "pytorch"),
                                          ({"onnx": "m.onnx"}, "onnx")])
def test_the_frontend_is_chosen_from_the_recipes_model_field(source, kind):
    assert frontend_for(ModelSource(**source)) is FRONTENDS[kind]


def test_an_unknown_frontend_names_the_choices():
    with pytest.raises(ConfigError, match="expected one of: pytorch, onnx"):
        frontend_named("tflite")


def test_a_lowering_the_import_provides_reaches_iree_as_it_is_with_its_input_type():
    provided = ImportedGraph(b"torch-backend", {"torch": LoweringSource(b"onnx-form", "onnx")})
    assert provided.lowered("torch") == LoweringSource(b"onnx-form", "onnx")
    assert ImportedGraph(b"torch-backend").lowered("torch") == LoweringSource(b"torch-backend",
                                                                               "torch")
    target = load_target("host")
    assert compile_flags(target, "torch", input_type="onnx")[0] == "--iree-input-type=onnx"
    assert compile_flags(target, "torch")[0] == "--iree-input-type=torch"


def test_one_fingerprint_names_a_target_in_every_cache(tmp_path, monkeypatch):
    from edgekit.tune.tuner import record_path
    host = load_target("host")
    retuned = host.model_copy(update={"source": "elsewhere.yaml",
                                      "tune": host.tune.model_copy(update={"threads": (1, 2)})})
    assert retuned.fingerprint() == host.fingerprint()  # what tune tries is not the target
    flagged = host.model_copy(update={"flags": (*host.flags, "--iree-opt-level=O3")})
    assert flagged.fingerprint() != host.fingerprint()
    assert f"-host-{host.fingerprint()[:8]}-" in record_path("ab" * 32, host).name
