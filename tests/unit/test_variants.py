"""Multi-variant profiles and the choice of module on a device (pure logic)."""

import pytest

from edgekit.config.profiles import CpuSpec, load_target
from edgekit.device.preflight import pick_variant
from edgekit.device.probe import DeviceInfo
from edgekit.errors import ConfigError
from edgekit.models.bundle import ModuleVariant, check_payload_name
from edgekit.pipeline.lower import variant_flags

PI_PROFILE = """extends: rpi4
variants:
  - name: a76-dotprod
    cpu: {cpu: cortex-a76, features: "+neon,+dotprod,+fullfp16"}
"""
A76 = ModuleVariant(name="a76-dotprod", file="variants/a76-dotprod.vmfb", cpu="cortex-a76",
                    features="+neon,+dotprod,+fullfp16")


class _Manifest:  # pick_variant reads only `variants`
    def __init__(self, *variants):
        self.variants = variants


def test_a_profile_lists_variants_beside_its_baseline_cpu(tmp_path):
    (tmp_path / "mixed-pis.yaml").write_text(PI_PROFILE)
    target = load_target(str(tmp_path / "mixed-pis.yaml"))
    assert target.cpu.cpu == "cortex-a72" and target.variants[0].cpu.cpu == "cortex-a76"
    assert target.fingerprint() != load_target("rpi4").fingerprint()


def test_variants_are_for_cpu_backends_only(tmp_path):
    (tmp_path / "gpu.yaml").write_text("extends: vulkan-generic\nvariants:\n  - name: x\n"
                                       "    cpu: {cpu: cortex-a76}\n")
    with pytest.raises(ConfigError, match="only for backend llvm-cpu"):
        load_target(str(tmp_path / "gpu.yaml"))


def test_a_pi5_runs_the_dotprod_variant_and_a_pi4_the_baseline():
    pi5 = DeviceInfo(arch="aarch64", hwcap=(1 << 1) | (1 << 10) | (1 << 20), hwcap2=0)
    pi4 = DeviceInfo(arch="aarch64", hwcap=(1 << 1), hwcap2=0)
    assert pick_variant(_Manifest(A76), pi5) == (A76, ())
    picked, skipped = pick_variant(_Manifest(A76), pi4)
    assert picked is None
    assert skipped == ("a76-dotprod: the device's CPU lacks dotprod, fullfp16",)


def test_a_feature_the_device_does_not_report_counts_as_missing():
    silent = DeviceInfo(arch="aarch64")      # no AT_HWCAP, no cpuinfo flags
    assert pick_variant(_Manifest(A76), silent)[0] is None


def test_a_variants_flags_swap_only_the_target_cpu():
    base = ("--iree-input-type=tosa", "--iree-hal-target-backends=llvm-cpu",
            "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
            "--iree-llvmcpu-target-cpu=cortex-a72", "--iree-opt-data-tiling")
    flags = variant_flags(base, CpuSpec(triple="aarch64-unknown-linux-gnu", cpu="cortex-a76",
                                        features="+dotprod"))
    assert flags == ("--iree-input-type=tosa", "--iree-hal-target-backends=llvm-cpu",
                     "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
                     "--iree-llvmcpu-target-cpu=cortex-a76",
                     "--iree-llvmcpu-target-cpu-features=+dotprod", "--iree-opt-data-tiling")


def test_a_bundle_may_hold_variant_modules_and_nothing_else_under_variants():
    assert check_payload_name("variants/a76-dotprod.vmfb")
    for bad in ("variants/../module.vmfb", "variants/x.so", "variants/.hidden.vmfb"):
        with pytest.raises(ValueError):
            check_payload_name(bad)
