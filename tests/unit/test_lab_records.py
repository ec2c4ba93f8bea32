"""Lab device records: where an aarch64 device's paths are on this machine, and the sshd
configuration an ordinary user can run (pure logic; tests/lab starts real devices)."""

from pathlib import Path

from edgekit.lab.devices import LabDevice, _sshd_config, enter_script


def device(chroot: str) -> LabDevice:
    own = "/home/me/.config/edgekit/lab/devices/pi"
    return LabDevice(name="pi", arch="aarch64" if chroot else "x86_64", host="127.0.0.11",
                     port=2222, user="me", index=1, chroot=chroot, config_dir=f"{own}/sshd",
                     home="/root" if chroot else "/home/me", host_home=f"{own}/home")


def test_an_aarch64_devices_home_and_tmp_are_its_own_folders_and_the_rest_is_the_rootfs():
    pi = device("/cache/rootfs")
    own = Path("/home/me/.config/edgekit/lab/devices/pi")
    assert pi.host_path("/root/.edgekit/apps") == own / "home" / ".edgekit" / "apps"
    assert pi.host_path("/root") == own / "home"
    assert pi.host_path("/tmp/x") == pi.host_path("/var/tmp/x") == own / "tmp" / "x"
    assert pi.host_path("/etc/os-release") == Path("/cache/rootfs/etc/os-release")
    assert pi.host_path("/rootless") == Path("/cache/rootfs/rootless")


def test_an_x86_64_devices_home_is_its_own_folder_and_the_rest_this_machines():
    box = device("")          # its home is the user's (/home/me): its own folder bound there
    assert box.host_path("/home/me/a") == Path("/home/me/.config/edgekit/lab/devices/pi/home/a")
    assert box.host_path("/etc/hostname") == Path("/etc/hostname")


def test_every_session_goes_through_the_devices_enter_script_as_the_user():
    config = _sshd_config(device("/cache/rootfs"))
    assert "ForceCommand /home/me/.config/edgekit/lab/devices/pi/sshd/enter" in config
    assert "AllowUsers me" in config and "UsePAM no" in config and "Port 2222" in config
    script = enter_script(device("/cache/rootfs"))
    assert "unshare --user --map-root-user --mount" in script
    assert "remount,bind,ro" in script          # the shared rootfs is read-only to devices
    assert "mount --rbind /home/me/.config/edgekit/lab/devices/pi/home /home/me" in enter_script(
        device(""))
