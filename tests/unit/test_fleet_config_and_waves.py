"""Fleet inventories (edgekit YAML and Ansible INI/YAML) and the wave policy: pure logic."""

import textwrap

import pytest

from edgekit.config.fleet import load_fleet
from edgekit.errors import ConfigError
from edgekit.fleet.waves import halts, plan_waves

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path

def test_device_settings_layer_defaults_then_groups_then_the_device(tmp_path):
    fleet = load_fleet(write(tmp_path, "fleet.yaml", """
        defaults: {user: pi, target: rpi4, identity: keys/fleet, labels: {site: north}}
        groups:
          fast: {defaults: {target: rpi5, port: 2200}, devices: [b]}
        devices:
          a: {host: 192.0.2.1}
          b: {host: 192.0.2.2, labels: {rack: "7"}}
          c: {host: 192.0.2.3, user: admin, target: host}
        """))
    a, b, c = fleet.devices
    assert (a.address, a.target, a.identity) == ("pi@192.0.2.1:22", "rpi4",
                                                 str(tmp_path / "keys/fleet"))
    assert (b.address, b.target, b.groups, b.labels) == ("pi@192.0.2.2:2200", "rpi5", ("fast",),
                                                         {"site": "north", "rack": "7"})
    assert (c.address, c.target) == ("admin@192.0.2.3:22", "host")
    assert [d.name for d in fleet.select("fast").devices] == ["b"]
    assert [d.name for d in fleet.select("rack=7").devices] == ["b"]


@pytest.mark.parametrize("text, where, key", [
    ("devices:\n  a: {host: 192.0.2.1, target: rpi4, prot: 22}\n", ":2", "devices.a.prot"),
    ("devices:\n  a: {host: 192.0.2.1}\n", ":2", "devices.a.target"),
    ("groups:\n  g: {devices: [zz]}\ndevices:\n  a: {host: h, target: rpi4}\n", ":2",
     "groups.g.devices"),
    ("devices:\n  a: {host: 'h; rm -rf /', target: rpi4}\n", ":2", "devices.a.host"),
    ("devices:\n  a: {host: h, target: rpi4}\nrollout:\n  waves: [0]\n", ":4",
     "rollout.waves"),
    ("devices:\n  a: {host: h, target: rpi4}\nrollout:\n  max_fail: 150%\n", ":4",
     "rollout.max_fail"),
])


def test_fleet_file_mistakes_name_file_line_and_key(tmp_path, text, where, key):
    path = write(tmp_path, "fleet.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_fleet(path)
    assert caught.value.where == f"{path}{where}" and caught.value.key == key

def test_an_ansible_ini_inventory_gives_addresses_groups_and_targets(tmp_path):
    fleet = load_fleet(write(tmp_path, "hosts.ini", """
        # production boards
        [pis]
        pi-01 ansible_host=192.0.2.11 ansible_user=pi
        pi-02 ansible_host=192.0.2.12 ansible_port=2222 edgekit_label_site=south

        [gpus]
        gpu-01.example.org ansible_host=192.0.2.21 edgekit_target=vulkan-generic

        [edge:children]
        pis
        gpus

        [pis:vars]
        edgekit_target=rpi4
        ansible_ssh_private_key_file=/keys/pi

        [all:vars]
        ansible_user=admin
        """))
    by_name = {d.name: d for d in fleet.devices}
    assert by_name["pi-01"].address == "pi@192.0.2.11:22"
    assert by_name["pi-02"].address == "admin@192.0.2.12:2222"
    assert by_name["pi-02"].labels == {"site": "south"} and by_name["pi-02"].target == "rpi4"
    assert by_name["pi-01"].identity == "/keys/pi"
    gpu = by_name["gpu-01.example.org"]
    assert (gpu.target, gpu.groups) == ("vulkan-generic", ("edge", "gpus"))
    assert by_name["pi-01"].groups == ("edge", "pis")

def test_an_ansible_yaml_inventory_gives_the_same_devices(tmp_path):
    fleet = load_fleet(write(tmp_path, "inventory.yml", """
        all:
          vars: {ansible_user: admin, edgekit_target: host}
          children:
            pis:
              vars: {edgekit_target: rpi4}
              hosts:
                pi-01: {ansible_host: 192.0.2.11, ansible_user: pi}
                pi-02: {ansible_host: 192.0.2.12, ansible_port: 2222}
          hosts:
            box: {ansible_host: 192.0.2.30}
        """))
    by_name = {d.name: d for d in fleet.devices}
    assert (by_name["pi-01"].address, by_name["pi-01"].target) == ("pi@192.0.2.11:22", "rpi4")
    assert by_name["pi-02"].address == "admin@192.0.2.12:2222"
    assert (by_name["box"].target, by_name["box"].groups) == ("host", ())
    assert by_name["pi-01"].groups == ("pis",)

def test_an_ansible_ini_host_line_without_key_value_pairs_names_its_line(tmp_path):
    path = write(tmp_path, "hosts", "[pis]\npi-01 ansible_host\n")
    with pytest.raises(ConfigError) as caught:
        load_fleet(path)
    assert caught.value.where == f"{path}:2"

def test_waves_follow_ansible_serial_with_a_canary_per_target():
    devices = [(f"h{i}", "host") for i in range(16)] + \
        [(f"p{i}", "rpi4") for i in range(4)]
    waves = plan_waves(devices, lambda d: d[1], canary=1, waves=["25%", "100%"])
    assert [len(w) for w in waves] == [2, 5, 13]
    assert waves[0] == [("h0", "host"), ("p0", "rpi4")]
    assert sum(waves, []) and sorted(sum(waves, [])) == sorted(devices)
    # without a canary: plain serial, the last size repeating
    assert [len(w) for w in plan_waves(devices, lambda d: d[1], None, [1, "10%"])] == \
        [1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]
    # a percentage that rounds to zero still takes one device
    assert [len(w) for w in plan_waves(devices[:3], lambda d: d[1], None, ["10%"])] == [1, 1, 1]


@pytest.mark.parametrize("failed, size, limit, expected", [
    (0, 5, 0, False), (1, 5, 0, True), (2, 7, 2, False), (3, 7, 2, True),
    (1, 10, "10%", False), (2, 10, "10%", True), (1, 1, "0%", True), (0, 4, "0%", False),
])


def test_max_fail_halts_when_exceeded_not_when_equalled(failed, size, limit, expected):
    assert halts(failed, size, limit) is expected
