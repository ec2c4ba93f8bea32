"""The `npu:` section's names reach a device's probe: plain /dev paths and file names only."""

import pytest

from edgekit.config.profiles import load_target
from edgekit.errors import ConfigError


def test_rk3588_npu_names_the_npus_device_file_library_and_driver():
    npu = load_target("rk3588-npu").npu
    assert (npu.kind, npu.accelerator, npu.kernel_module) == ("rknpu", "rk3588", "rknpu")
    assert npu.device_files == ("/dev/dri/renderD129",) and npu.libraries == ("librknnrt.so",)


@pytest.mark.parametrize("line", ['device_files: ["/dev/x; rm -rf ~"]',
                                  'device_files: [/etc/passwd]',
                                  'libraries: ["../lib.so"]',
                                  'kernel_module: "rknpu; reboot"'])
def test_a_name_that_is_no_plain_path_or_file_name_is_refused_with_its_line(tmp_path, line):
    path = tmp_path / "board.yaml"
    path.write_text("description: b\nextends: rk3588-cpu\nnpu:\n  kind: rknpu\n"
                    f"  accelerator: rk3588\n  {line}\n")
    with pytest.raises(ConfigError) as err:
        load_target(str(path))
    assert err.value.where.startswith(f"{path}:6")
