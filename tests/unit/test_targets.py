import pytest

from edgekit.config.profiles import available_targets, host_arch, load_target
from edgekit.errors import ConfigError
from edgekit.toolchain.iree import compile_flags, target_flags

REQUIRED = {"host", "rpi4", "rpi5", "rk3588-cpu", "rk3588-gpu", "vulkan-generic"}

def test_every_shipped_profile_loads():
    names = set(available_targets())
    assert REQUIRED <= names
    for name in names:
        assert load_target(name).name == name

def test_a_board_inherits_its_family_through_extends():
    rpi4 = load_target("rpi4")
    assert rpi4.arch == "aarch64"
    assert rpi4.cpu.triple == "aarch64-unknown-linux-gnu"
    assert rpi4.cpu.cpu == "cortex-a72"
    assert load_target("rk3588-gpu").vulkan.target == "valhall"
    assert load_target("rk3588-gpu").runtime.driver == "vulkan"

def test_host_means_this_machines_arch():
    assert load_target("host").arch == host_arch()

def test_rpi4_flags_cross_compile_for_cortex_a72():
    flags = target_flags(load_target("rpi4"))
    assert "--iree-hal-target-backends=llvm-cpu" in flags
    assert "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu" in flags
    assert "--iree-llvmcpu-target-cpu=cortex-a72" in flags

def test_vulkan_flags_name_the_vulkan_target():
    flags = target_flags(load_target("rk3588-gpu"))
    assert flags == ("--iree-hal-target-backends=vulkan-spirv", "--iree-vulkan-target=valhall")

def test_recipe_flags_come_last_and_the_input_type_follows_the_lowering():
    flags = compile_flags(load_target("host"), "tosa", ("--iree-opt-level=O3",))
    assert flags[0] == "--iree-input-type=tosa" and flags[-1] == "--iree-opt-level=O3"
    assert compile_flags(load_target("host"), "torch")[0] == "--iree-input-type=torch"

def test_users_add_boards_with_a_yaml_file_on_the_search_path(tmp_path, monkeypatch):
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "jetson-cpu.yaml").write_text(
        "extends: aarch64-generic\ndescription: mine\ncpu:\n  cpu: cortex-a78\n")
    monkeypatch.setenv("EDGEKIT_TARGETS_PATH", str(boards))
    target = load_target("jetson-cpu")
    assert target.cpu.cpu == "cortex-a78" and target.cpu.triple.startswith("aarch64")
    assert load_target(str(boards / "jetson-cpu.yaml")).name == "jetson-cpu"

def test_an_unknown_target_lists_the_choices():
    with pytest.raises(ConfigError) as err:
        load_target("rpi9")
    assert "rpi4" in err.value.hint and err.value.exit_code == 2

def test_extends_cycles_and_missing_parents_are_config_errors(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text("extends: b\n")
    (tmp_path / "b.yaml").write_text("extends: a\n")
    (tmp_path / "c.yaml").write_text("description: x\nextends: nope\n")
    monkeypatch.setenv("EDGEKIT_TARGETS_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="cycle"):
        load_target("a")
    with pytest.raises(ConfigError) as err:
        load_target("c")
    assert err.value.where == f"{tmp_path / 'c.yaml'}:2"

def test_a_backend_without_its_section_is_refused_with_the_file(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text("arch: any\nbackend: vulkan-spirv\n")
    with pytest.raises(ConfigError, match="vulkan:") as err:
        load_target(str(path))
    assert err.value.where.startswith(str(path))

def test_a_misspelled_profile_key_points_at_its_line(tmp_path):
    path = tmp_path / "board.yaml"
    path.write_text("extends: rpi4\ncpu:\n  cpu: cortex-a72\n  featurs: +neon\n")
    with pytest.raises(ConfigError) as err:
        load_target(str(path))
    assert err.value.where == f"{path}:4" and "features" in err.value.hint

def test_tune_candidates_are_lowering_by_flag_set_with_the_default_first():
    from edgekit.tune.tuner import candidate_variants
    host = load_target("host")
    variants = candidate_variants(host, ("tosa", "linalg"), None)
    assert [v.name for v in variants[:2]] == ["tosa/default", "tosa/data-tiling"]
    assert len(variants) == 2 * (1 + len(host.tune.flag_sets))
    assert variants[0].flags == ()
    with pytest.raises(ConfigError) as caught:
        candidate_variants(host, None, ("fastest",))
    assert "im2col+data-tiling" in caught.value.hint

def test_a_tune_flag_set_with_a_non_flag_is_refused_with_its_line(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("extends: host\ntune:\n  flag_sets:\n    fast: [O3]\n")
    with pytest.raises(ConfigError) as caught:
        load_target(str(path))
    assert caught.value.where.endswith("t.yaml:3") and "start with '--'" in caught.value.what
