"""The source key's pure parts (pipeline/source_key.py): which files a model is made from, what
a build read, and when the sources cannot decide."""

import sys

import numpy as np

from edgekit.compile.runners import _flat_tensor_signature
from edgekit.config.recipe import load_recipe
from edgekit.pipeline import source_key


def _recipe(tmp_path, model: str):
    path = tmp_path / "recipe.yaml"
    path.write_text(f"name: t\nmodel:\n  {model}\ninputs:\n  - name: x\n    shape: [1]\n")
    return load_recipe(path)


def test_a_factory_in_installed_code_cannot_decide(tmp_path):
    assert source_key.model_sources(_recipe(tmp_path, 'python: "json.decoder:JSONDecoder"')) \
        is None


def test_the_module_graph_follows_project_imports_relative_ones_too(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("VALUE = 1\n")
    (pkg / "helper.py").write_text("from .sub import deep\nimport json\n")
    (pkg / "model.py").write_text("from . import helper\n\ndef factory():\n    pass\n")
    files = source_key.model_sources(_recipe(tmp_path, 'python: "pkg/model.py:factory"'))
    assert files is not None
    names = {p.split("/")[-1] for p in files}
    assert {"model.py"} <= names   # a file factory: its own module always counts
    sys.path.insert(0, str(tmp_path))
    try:
        graph = source_key.module_graph("pkg.model", str(pkg / "model.py"))
    finally:
        sys.path.remove(str(tmp_path))
    assert {p.replace(str(tmp_path), "") for p in graph} == {
        "/pkg/model.py", "/pkg/__init__.py", "/pkg/helper.py", "/pkg/sub/__init__.py",
        "/pkg/sub/deep.py"}


def test_a_model_file_is_keyed_on_its_bytes(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"one")
    recipe = _recipe(tmp_path, "onnx: m.onnx")
    first = source_key.model_sources(recipe)
    (tmp_path / "m.onnx").write_bytes(b"two")
    assert source_key.model_sources(recipe) != first


def test_reads_are_recorded_and_files_the_block_wrote_are_not(tmp_path):
    weights = tmp_path / "w.npy"
    np.save(weights, np.ones(3))
    with source_key.recording_reads() as read:
        np.load(weights)
        (tmp_path / "scratch.txt").write_text("x")
        (tmp_path / "scratch.txt").read_text()
    assert read == {str(weights.resolve())}


def test_a_record_no_longer_holds_when_a_file_changes_or_appears(tmp_path):
    present, absent = tmp_path / "a", tmp_path / "b"
    present.write_text("1")
    source_key.store_record("k" * 64, "key", None, {str(present), str(absent)})
    record = source_key.load_record("k" * 64)
    assert record.key == "key" and record.still_holds()
    absent.write_text("now here")
    assert not record.still_holds()


def test_the_lean_call_takes_flat_tensor_signatures_only():
    decl = "sync func @main(%input0: tensor<1x16xf32>, %input1: tensor<1x16xf32>) -> " \
           "(%output0: tensor<1x16xf32>)"
    assert _flat_tensor_signature({"iree.abi.declaration": decl}) == (2, 1)
    assert _flat_tensor_signature({"iree.abi.declaration": decl.replace(
        "%input1: tensor<1x16xf32>", "%input1: i64")}) is None
    assert _flat_tensor_signature({}) is None


def test_the_build_key_changes_with_edgekit_s_own_code(monkeypatch):
    """An edited rewrite with the same flags must not answer from what the old code built (the
    full key used to hold only edgekit's version number)."""
    import types

    from edgekit.config.profiles import load_target
    from edgekit.pipeline import build as build_module
    exported = types.SimpleNamespace(digest="m" * 64, quantization=None)
    target = load_target("host")
    keys = set()
    for code in ("a" * 64, "b" * 64):
        monkeypatch.setattr(build_module, "edgekit_code_digest", lambda code=code: code)
        keys.add(build_module.build_key({"recipe": {}}, target, exported))
    assert len(keys) == 2
