import pytest

from edgekit.config.profiles import load_target
from edgekit.device.preflight import fitting_targets, problems, space_problem
from edgekit.device.probe import DeviceInfo, parse_probe
from edgekit.errors import ConfigError
from edgekit.models.bundle import LoweringRecord, Manifest
from edgekit.config.recipe import Validation
from edgekit.config.address import parse_address, safe_name

PI4_HWCAP = 0b11  # fp + asimd


def manifest(target: str) -> Manifest:
    t = load_target(target)
    return Manifest(app="a", created_at="", model_source="", model_digest="", recipe_digest="",
                    target=t.name, target_profile=t.model_dump(mode="json", exclude={"source"}),
                    backend=t.backend, arch=t.arch, runtime_driver=t.runtime.driver,
                    compiler_version="3.13.0", compile_flags=(), inputs=(), outputs=(),
                    golden_inputs=(), golden_outputs=(), tolerances=Validation(),
                    lowering=LoweringRecord(requested="auto", used="tosa", attempts=()),
                    toolchain={}, files={})


def pi(**overrides) -> DeviceInfo:
    return DeviceInfo(**{"arch": "aarch64", "glibc": "2.36", "free_kb": 10**7,
                         "hwcap": PI4_HWCAP, **overrides})


def test_a_pi4_bundle_fits_a_pi4():
    assert problems(manifest("rpi4"), pi()) == []


def test_wrong_arch_missing_features_old_glibc_and_full_disk_are_named():
    assert "x86_64" in problems(manifest("rpi4"), pi(arch="x86_64"))[0]
    lacking = problems(manifest("rpi5"), pi())  # rpi5 code uses dotprod and fp16
    assert any("dotprod" in p for p in lacking) and any("fullfp16" in p for p in lacking)
    assert "glibc 2.17" in problems(manifest("rpi4"), pi(glibc="2.17"))[0]
    assert problems(manifest("rpi4"), pi(free_kb=100)) == []     # room is asked apart
    assert "MiB free" in space_problem(pi(free_kb=100), 10**6)
    assert space_problem(pi(), 10**6) is None


def test_unknown_cpu_features_do_not_block_a_deploy():
    # qemu user mode shows the host's /proc/cpuinfo and no hwcap here: unknown, not missing
    info = pi(hwcap=None, cpu_flags=("fpu", "sse2", "avx2"))
    assert problems(manifest("rpi5"), info) == []


def test_vulkan_bundles_need_a_matching_vulkan_device():
    llvmpipe = DeviceInfo(arch="x86_64", vulkan_devices=("llvmpipe (LLVM 15.0.6, 256 bits)",))
    mali = DeviceInfo(arch="aarch64", vulkan_devices=("Mali-G610 r0p0",))
    assert "no Vulkan device" in problems(manifest("vulkan-generic"), DeviceInfo(arch="x86_64"))[0]
    assert problems(manifest("vulkan-generic"), llvmpipe) == []
    mismatch = problems(manifest("rk3588-gpu"), llvmpipe)
    assert "valhall" in mismatch[0] and "llvmpipe" in mismatch[0]
    assert problems(manifest("rk3588-gpu"), mali) == []
    assert "vulkan-generic" in fitting_targets(llvmpipe, backend="vulkan-spirv")
    assert "rk3588-gpu" not in fitting_targets(llvmpipe)


def test_probe_output_is_parsed_including_repeated_keys():
    info = parse_probe("arch=aarch64\nglibc=2.36\ncores=4\nhwcap=ecfffffb\nhwcap2=0x7f877fff\n"
                       "vulkan_device=Mali-G610\nnpu_node=/dev/rknpu\n"
                       "runtime=iree-3.13.0-aarch64\nshims=abc\nnoise without equals\n")
    assert info.cores == 4 and info.vulkan_devices == ("Mali-G610",)
    assert info.npu_nodes == ("/dev/rknpu",) and info.runtimes == ("iree-3.13.0-aarch64",)
    assert info.has_cpu_feature("dotprod") is True and info.has_cpu_feature("i8mm") is True


@pytest.mark.parametrize("text,expected", [
    ("pi@192.0.2.10", ("pi", "192.0.2.10", 22)),
    ("192.0.2.10:2222", ("root", "192.0.2.10", 2222)),
    ("ubuntu@board.local", ("ubuntu", "board.local", 22)),
])
def test_addresses_parse(text, expected):
    a = parse_address(text)
    assert (a.user, a.host, a.port) == expected


@pytest.mark.parametrize("text", ["pi@host;reboot", "p i@host", "pi@host:99999", "pi@-oProxy",
                                  "$(id)@host", "pi@host:22:1"])
def test_shell_like_addresses_are_refused(text):
    with pytest.raises(ConfigError):
        parse_address(text)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "x; rm -rf /", "-rf", "", "a" * 65])
def test_unsafe_path_names_are_refused(name):
    with pytest.raises(ConfigError):
        safe_name(name, "app")
