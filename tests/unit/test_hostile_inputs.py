"""Property tests (hypothesis): any recipe, target profile, fleet file or bundle manifest —
random YAML/JSON documents, valid ones mutated (wrong types, unknown keys, huge numbers,
unicode, tags, nesting), raw text full of YAML syntax — gives a loaded object or a one-line
error of its kind (ConfigError: exit 2; BundleError: exit 6). Never a traceback or another
exception (issue 17, "Hostile inputs").

Examples per property: the `edgekit` profile (unit tier, seconds). A longer search:
`EDGEKIT_HYPOTHESIS=thorough python3 -m pytest tests/unit/test_hostile_inputs.py` (about 40x).
"""

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.config.fleet import load_fleet
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.errors import BundleError, ConfigError, EdgekitError
from edgekit.models.bundle import MANIFEST, load_bundle
from tests.fixtures.cli import edgekit_here

settings.register_profile("edgekit", max_examples=60, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("thorough", parent=settings.get_profile("edgekit"),
                          max_examples=2500)
settings.load_profile(os.environ.get("EDGEKIT_HYPOTHESIS", "edgekit"))

REPO = Path(__file__).resolve().parents[2]

# --- valid documents to mutate ------------------------------------------------------------------
RECIPE = {
    "name": "demo", "model": {"python": "factory.py:make"},
    "inputs": [{"name": "x", "shape": [1, "n"], "dtype": "float32", "low": -1, "high": 1}],
    "dynamic_dims": {"n": {"min": 1, "max": 8, "example": 4}},
    "lowering": "auto", "compile": {"flags": ["--iree-opt-data-tiling"]},
    "validation": {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.999, "top1": "auto",
                   "outputs": {"y": {"atol": 0.1}}},
    "quantize": {"mode": "int8", "calibration": "factory.py:samples", "min_cosine": 0.98},
    "hooks": {"after_activate": "systemctl --user restart app", "health": "app --check",
              "timeout_s": 30},
    "seed": 0,
}
TARGET = yaml.safe_load((REPO / "targets" / "host.yaml").read_text())
FLEET = {
    "defaults": {"user": "pi", "identity": "id_ed25519", "target": "host"},
    "groups": {"floor": {"defaults": {"target": "host", "labels": {"site": "north"}},
                         "devices": ["d2"]}},
    "devices": {"d1": {"host": "local:d1", "labels": {"site": "south"}},
                "d2": {"host": "192.0.2.17", "port": 2222}},
    "rollout": {"canary": 1, "waves": ["10%", "50%", "100%"], "max_fail": 0,
                "max_p90_ratio": 1.25, "rollback_on_halt": "wave"},
    "hooks": {"health": "true", "timeout_s": 5},
}
SIG = {"name": "x", "shape": [1, 4], "dtype": "float32"}
MANIFEST_DOC = {
    "schema_version": 1, "app": "demo", "created_at": "2026-01-01T00:00:00Z",
    "model_source": "m.py:f", "model_digest": "0" * 64, "recipe_digest": "1" * 64,
    "target": "host", "target_profile": {"arch": "x86_64"}, "backend": "llvm-cpu",
    "arch": "x86_64", "runtime_driver": "local-task", "compiler_version": "3.13.0",
    "compile_flags": ["--iree-hal-target-backends=llvm-cpu"], "entry_function": "main",
    "inputs": [SIG], "outputs": [dict(SIG, name="y")],
    "golden_inputs": ["golden/input_0.npy"], "golden_outputs": ["golden/output_0.npy"],
    "tolerances": {"atol": 1e-4}, "lowering": {"requested": "auto", "used": "tosa",
                                               "attempts": [{"lowering": "tosa", "ok": True}]},
    "toolchain": {"iree": "3.13.0"},
    "files": {"module.vmfb": "2" * 64, "golden/input_0.npy": "3" * 64,
              "golden/output_0.npy": "4" * 64},
}

# --- strategies -----------------------------------------------------------------------------------
KNOWN_KEYS = sorted({*RECIPE, *TARGET, *FLEET, *MANIFEST_DOC, "python", "exported", "onnx",
                     "trust_pickle", "shape", "dtype", "host", "port", "user", "identity",
                     "target", "labels", "canary", "waves", "extends", "all", "hosts",
                     "children", "vars", "ansible_host", "<<"})
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(),
    st.integers(min_value=-(10 ** 40), max_value=10 ** 40),
    st.floats(), st.text(max_size=20),
    st.sampled_from(["", "auto", "tosa", "100%", "0%", "250%", "-1", "host", "rpi4",
                     "local:", "local:d9", "~/.ssh/id", "../../etc/passwd", "a:b", "x.py:f",
                     "root@127.0.0.1:22", "a b=c", "{{ lookup('pipe','id') }}", "\x00",
                     "\u202e\u0301", "😀" * 3, "1e999", "nan"]))
KEYS = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12), st.integers(-3, 3))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=16)

# fragments that make YAML parsers and constructors work: tags, anchors, flow/block syntax
FRAGMENTS = st.sampled_from([
    "!!python/object:os.system", "!!python/object/apply:os.system ['id']",
    "!!python/name:os.system", "!!binary aGk=", "!!binary ???", "!!timestamp 2026-13-45",
    "!!int abc", "!!float x", "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "!foo",
    "!<tag:x>", "&a ", "*a", "*zz", "<<: *a", "<<: [1]", "{", "}", "[", "]", ": ", "- ", ", ",
    "\n", "\n  ", "? ", "|\n", ">-\n", "'", '"', "%YAML 1.1\n", "%TAG ! tag:x:\n", "---\n",
    "...\n", "\t", "\x00", "\x85", "\ufeff", "# c", "~", "name:", "model:", "python:",
    "devices:", "hosts:", "extends:", "rollout:", "9" * 40, "1e400", ".inf", ".nan",
])
RAW_TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=6)), max_size=25).map("".join)


@st.composite
def mutated(draw, base: dict):
    """`base` with a few changes at random key paths: a value replaced by any value, a key
    removed, an unknown or odd key added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        node, path = doc, []
        while isinstance(node, (dict, list)) and node and draw(st.booleans()):
            key = draw(st.sampled_from(sorted(node, key=str) if isinstance(node, dict)
                                       else range(len(node))))
            if not isinstance(node[key], (dict, list)):
                break
            node, path = node[key], [*path, key]
        if not isinstance(node, dict):
            continue
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "add" or not node:
            node[draw(KEYS)] = draw(VALUES)
        else:
            key = draw(st.sampled_from(sorted(node, key=str)))
            if action == "remove":
                del node[key]
            else:
                node[key] = draw(VALUES)
    return doc


def yaml_documents(base: dict):
    dumped = st.one_of(mutated(base), VALUES).flatmap(
        lambda data: st.booleans().map(
            lambda uni: yaml.safe_dump(data, allow_unicode=uni, sort_keys=False)))
    spliced = st.tuples(dumped, RAW_TEXT, st.integers(0, 10 ** 6)).map(
        lambda t: t[0][:t[2] % (len(t[0]) + 1)] + t[1] + t[0][t[2] % (len(t[0]) + 1):])
    return st.one_of(dumped, RAW_TEXT, spliced)


# --- the property -----------------------------------------------------------------------------
def assert_loads_or_one_line(load, path, error: type[EdgekitError]):
    """A loaded object, or `error` whose message is one line (and at most one hint line)."""
    try:
        load(path)
    except error as exc:
        head, *hints = str(exc).split("\n")
        assert head.strip(), str(exc)
        assert len(hints) <= 1 and all(h.startswith("  hint: ") for h in hints), str(exc)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


@given(text=yaml_documents(RECIPE))
def test_any_recipe_loads_or_is_a_one_line_config_error(tmp_path, text):
    assert_loads_or_one_line(load_recipe, write(tmp_path / "recipe.yaml", text), ConfigError)


@given(text=yaml_documents(TARGET))
def test_any_target_profile_loads_or_is_a_one_line_config_error(tmp_path, text):
    path = write(tmp_path / "board.yaml", text)
    assert_loads_or_one_line(lambda p: load_target(str(p)), path, ConfigError)


@given(text=yaml_documents(FLEET), name=st.sampled_from(["fleet.yaml", "inventory.ini",
                                                          "hosts"]))
def test_any_fleet_file_or_inventory_loads_or_is_a_one_line_config_error(tmp_path, text, name):
    assert_loads_or_one_line(load_fleet, write(tmp_path / name, text), ConfigError)


@pytest.mark.parametrize("text", ["'<<':\n  children: 1\n",       # found by the test above
                                  "all:\n  hosts: [a, b]\n", "all:\n  vars: 3\n",
                                  "all:\n  hosts:\n    a: 5\n"])
def test_an_ansible_inventory_section_that_is_no_mapping_is_a_one_line_error(tmp_path, text):
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_fleet(write(tmp_path / "fleet.yaml", text))



def test_a_fleet_name_holding_a_newline_or_escape_is_shown_escaped_on_one_line(tmp_path):
    # names come from the user's file into the message's text, its key and its hint
    fleet = copy.deepcopy(FLEET)
    fleet["groups"]["fl\noor"] = {"devices": ["d\x1b[2J9"]}
    with pytest.raises(ConfigError) as caught:
        load_fleet(write(tmp_path / "fleet.yaml", yaml.safe_dump(fleet)))
    assert "\\n" in str(caught.value) and "\\x1b" in str(caught.value)
    assert_loads_or_one_line(load_fleet, tmp_path / "fleet.yaml", ConfigError)

MANIFESTS = st.one_of(
    mutated(MANIFEST_DOC).map(json.dumps), VALUES.map(json.dumps),
    st.tuples(mutated(MANIFEST_DOC).map(json.dumps), st.integers(0, 10 ** 6)).map(
        lambda t: t[0][:t[1] % (len(t[0]) + 1)]),                       # cut short
    st.binary(max_size=64).map(lambda b: b.decode("latin-1")))


@given(text=MANIFESTS)
def test_any_bundle_manifest_loads_or_is_a_one_line_bundle_error(tmp_path, text):
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    write(bundle / MANIFEST, text)
    assert_loads_or_one_line(load_bundle, bundle, BundleError)



@pytest.mark.parametrize("key", ["\n", "a\nb", "\x1b[2J"])    # the first found by the test above
def test_a_manifest_key_holding_a_newline_or_escape_is_named_on_one_line(tmp_path, key):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    write(bundle / MANIFEST, json.dumps({**MANIFEST_DOC, key: None}))
    with pytest.raises(BundleError) as caught:
        load_bundle(bundle)
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)
    assert key.encode("unicode_escape").decode("ascii") in str(caught.value)

def test_the_valid_bases_load(tmp_path):
    (tmp_path / "factory.py").write_text("")
    load_recipe(write(tmp_path / "recipe.yaml", yaml.safe_dump(RECIPE)))
    load_target(str(write(tmp_path / "board.yaml", yaml.safe_dump(TARGET))))
    load_fleet(write(tmp_path / "fleet.yaml", yaml.safe_dump(FLEET)))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    write(bundle / MANIFEST, json.dumps(MANIFEST_DOC))
    load_bundle(bundle)


# --- a sample through the CLI: exit code and stderr ---------------------------------------------
def edgekit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return edgekit_here(*args, cwd=cwd)


def assert_exit_and_one_line(proc: subprocess.CompletedProcess, codes: set[int]) -> None:
    assert proc.returncode in codes, proc.stderr
    assert "Traceback" not in proc.stderr
    if proc.returncode:
        head, *hints = proc.stderr.splitlines()
        assert head.startswith("error: ") and len(hints) <= 1, proc.stderr
        assert all(h.startswith("  hint: ") for h in hints), proc.stderr


@settings(max_examples=4)
@given(text=yaml_documents(TARGET))
def test_the_cli_reads_any_target_profile_with_exit_0_or_2(tmp_path, text):
    write(tmp_path / "board.yaml", text)
    assert_exit_and_one_line(edgekit("targets", "show", "./board.yaml", cwd=tmp_path), {0, 2})


@settings(max_examples=4)
@given(text=MANIFESTS)
def test_the_cli_refuses_a_broken_bundle_with_exit_6(tmp_path, text):
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    write(bundle / MANIFEST, text)
    assert_exit_and_one_line(edgekit("validate", str(bundle), "--local", cwd=tmp_path), {6})


@pytest.mark.parametrize("kind", ["recipe", "fleet"])
@settings(max_examples=2)
@given(text=st.one_of(RAW_TEXT, mutated(FLEET).map(yaml.safe_dump)))
def test_the_cli_reads_hostile_recipes_and_fleets_with_exit_2(tmp_path, kind, text):
    # a tag on the first line: the file can never load, whatever else it holds
    write(tmp_path / "f.yaml", "!!python/object:os.system\n" + text)
    argv = (["build", "--recipe", "f.yaml", "--target", "host"] if kind == "recipe" else
            ["fleet", "status", "--fleet", "f.yaml", "--app", "demo"])
    assert_exit_and_one_line(edgekit(*argv, cwd=tmp_path), {2})
