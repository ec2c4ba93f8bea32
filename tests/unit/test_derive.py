"""`targets derive`: a probe → a commented profile that loads like the in-tree ones."""

import yaml

from edgekit.config.profiles import load_target
from edgekit.device.derive import derive, vulkan_target
from edgekit.device.probe import DeviceInfo

PI5 = DeviceInfo(arch="aarch64", cores=4, mem_kb=8 * 1024 * 1024, cpu_model="",
                 cpu_part="0xd0b", hwcap=(1 << 1) | (1 << 10) | (1 << 20), hwcap2=0,
                 vulkan_devices=("Mali-G610 MC4",))


def test_a_pi5_probe_gives_a_cortex_a76_with_dotprod_and_a_valhall_gpu_profile(tmp_path):
    derived = derive(PI5, "my-board", "pi@10.0.0.5")
    text = derived.cpu_profile
    assert "CPU part 0xd0b" in text and "dotprod = AT_HWCAP bit 20" in text
    data = yaml.safe_load(text)
    assert data["extends"] == "aarch64-generic"
    assert data["cpu"] == {"cpu": "cortex-a76", "features": "+neon,+fullfp16,+dotprod"}
    (tmp_path / "my-board.yaml").write_text(text)
    target = load_target(str(tmp_path / "my-board.yaml"))
    assert target.cpu.triple == "aarch64-unknown-linux-gnu" and target.tune.threads == (1, 4)
    gpu = yaml.safe_load(derived.gpu_profile)
    assert gpu["vulkan"] == {"target": "valhall", "device_match": ["Mali"]}


def test_under_qemu_the_cpu_comes_from_hwcap_not_the_hosts_cpuinfo():
    qemu = DeviceInfo(arch="aarch64", cores=2, cpu_part="", cpu_flags=("fpu", "sse2"),
                      hwcap=(1 << 1) | (1 << 20), hwcap2=1 << 13)
    data = yaml.safe_load(derive(qemu, "emu", "lab").cpu_profile)
    assert data["cpu"] == {"cpu": "generic", "features": "+neon,+dotprod,+i8mm"}


def test_an_unknown_gpu_gets_the_vulkan_baseline():
    assert vulkan_target("llvmpipe (LLVM 15.0.6, 256 bits)") == ("vp_android_baseline_2022", "")


def test_a_big_little_board_targets_its_big_cores_and_says_which_to_pin():
    from edgekit.device.derive import BoardFacts
    facts = BoardFacts.parse("part 0 0xd05\npart 1 0xd05\npart 2 0xd05\npart 3 0xd05\n"
                             "part 4 0xd0b\npart 5 0xd0b\npart 6 0xd0b\npart 7 0xd0b\n"
                             "compatible radxa,rock-5b rockchip,rk3588 \n")
    rk3588 = DeviceInfo(arch="aarch64", cores=8, cpu_part="0xd05",
                        hwcap=(1 << 1) | (1 << 10) | (1 << 20), hwcap2=0)
    text = derive(rk3588, "rock5b", "rock@10.0.0.7", facts).cpu_profile
    assert "cores 4-7 cortex-a76 (0xd0b); cores 0-3 cortex-a55 (0xd05)" in text
    assert "taskset -c 4-7" in text and "rockchip,rk3588" in text
    data = yaml.safe_load(text)
    assert data["cpu"]["cpu"] == "cortex-a76" and data["tune"]["threads"] == [1, 4]


# `vulkaninfo --summary` as captured: Mesa's llvmpipe on this machine, and a Mali board's
LLVMPIPE = """Devices:
========
GPU0:
\tapiVersion         = 1.3.230
\tdriverVersion      = 0.0.1
\tvendorID           = 0x10005
\tdeviceID           = 0x0000
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
\tdriverID           = DRIVER_ID_MESA_LLVMPIPE
\tdriverName         = llvmpipe
"""
MALI = """Devices:
========
GPU0:
\tapiVersion         = 1.3.261
\tvendorID           = 0x13b5
\tdeviceID           = 0xa8670000
\tdeviceType         = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
\tdeviceName         = Mali-G610 MC4
\tdriverName         = Mali-G610
GPU1:
\tvendorID           = 0x10005
\tdriverName         = llvmpipe
"""


def _facts_from(summary: str, tmp_path):
    """BOARD_FACTS run by sh, with a `vulkaninfo` that prints the captured summary."""
    import os
    import subprocess

    from edgekit.device.derive import BOARD_FACTS, BoardFacts
    (tmp_path / "summary.txt").write_text(summary)
    tool = tmp_path / "vulkaninfo"
    tool.write_text(f"#!/bin/sh\ncat {tmp_path / 'summary.txt'}\n")
    tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(["sh", "-c", BOARD_FACTS], capture_output=True, text=True, env=env)
    return BoardFacts.parse(out.stdout)


def test_the_vulkan_vendor_id_picks_the_iree_target_and_says_so(tmp_path):
    facts = _facts_from(MALI, tmp_path)
    assert facts.vulkan == {"vendorID": "0x13b5", "deviceID": "0xa8670000",
                            "driverName": "Mali-G610"}      # the first device only
    board = DeviceInfo(**{**PI5.__dict__, "vulkan_devices": ("Mali-G610 MC4",)})
    gpu = derive(board, "my-board", "pi@10.0.0.5", facts).gpu_profile
    assert "vendorID 0x13b5, deviceID 0xa8670000, driver Mali-G610" in gpu
    assert yaml.safe_load(gpu)["vulkan"] == {"target": "valhall", "device_match": ["Mali"]}


def test_llvmpipe_by_its_mesa_vendor_id_gets_the_baseline(tmp_path):
    facts = _facts_from(LLVMPIPE, tmp_path)
    assert facts.vulkan["vendorID"] == "0x10005" and facts.vulkan["driverName"] == "llvmpipe"
    board = DeviceInfo(**{**PI5.__dict__, "vulkan_devices": ("llvmpipe (LLVM 15.0.6)",)})
    gpu = derive(board, "emu", "lab", facts).gpu_profile
    assert yaml.safe_load(gpu)["vulkan"] == {"target": "vp_android_baseline_2022"}
    assert "vendorID 0x10005" in gpu


def test_every_vendor_id_the_brief_names_maps_to_a_target():
    from edgekit.device.derive import vulkan_target_by_id
    assert [vulkan_target_by_id(v)[0] for v in ("0x13b5", "0x5143", "0x1002", "0x10de",
                                                 "0x8086", "0x10005")] == [
        "valhall", "adreno", "rdna3", "ampere", "vp_android_baseline_2022",
        "vp_android_baseline_2022"]
    assert vulkan_target_by_id("0x1234") is None and vulkan_target_by_id("") is None
