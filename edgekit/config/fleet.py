"""Fleet inventory: devices (address, key, target profile, labels), groups with per-group
defaults, the rollout policy and device hooks — from edgekit's own `fleet.yaml` or from an
Ansible inventory (INI or YAML) that users already keep.

edgekit fleet file::

    defaults: {user: pi, identity: ~/.ssh/fleet_ed25519, target: rpi4}
    groups:
      shop-floor: {defaults: {target: rpi5}, devices: [pi-07, pi-08]}
    devices:
      pi-01: {host: 192.0.2.11, labels: {site: north}}
      pi-07: {host: 192.0.2.17}
    rollout: {canary: 1, waves: [10%, 50%, 100%], max_fail: 0, max_p90_ratio: 1.25}
    hooks: {after_activate: "systemctl --user restart detector", health: "detector --check"}

Precedence for a device's settings: its own keys > its groups' defaults (in file order) >
top-level `defaults`. `host` may also name a device registered with edgekit (e.g. a lab
device), which brings its address and key, or be `local:DIR`: a directory on this machine
acting as the device's home (relative to the fleet file; no SSH, no key).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Literal

import pydantic

from edgekit.config.devices import load_registry
from edgekit.config.recipe import Hooks
from edgekit.config.schema_base import Frozen
from edgekit.config.yamlsrc import YamlDoc, load_yaml, validate
from edgekit.errors import ConfigError
from edgekit.config.address import (LOCAL_SCHEME, DeviceAddress, local_root, parse_address,
                                    safe_name)

Count = int | str   # a number of devices or a percentage such as "10%"
_PERCENT = re.compile(r"^(\d{1,3})%$")


def _check_count(value: Count, *, allow_zero: bool) -> Count:
    if isinstance(value, bool):
        raise ValueError("expected a count or a percentage such as '10%'")
    if isinstance(value, int):
        if value < (0 if allow_zero else 1):
            raise ValueError(f"must be {'>= 0' if allow_zero else '>= 1'}")
        return value
    match = _PERCENT.match(str(value).strip())
    if not match or not (allow_zero or int(match.group(1)) > 0) or int(match.group(1)) > 100:
        raise ValueError("expected a count or a percentage from 1% to 100% such as '10%'")
    return f"{int(match.group(1))}%"


class DeviceSettings(Frozen):
    """What a device, a group's `defaults` or the file's `defaults` may set."""

    host: str | None = pydantic.Field(default=None, description="host name, IP or registered "
                                      "device name")
    port: int | None = pydantic.Field(default=None, ge=1, le=65535)
    user: str | None = None
    identity: str | None = pydantic.Field(default=None, description="private key path")
    target: str | None = pydantic.Field(default=None, description="target profile")
    labels: dict[str, str] = pydantic.Field(default_factory=dict)


class GroupSpec(Frozen):
    defaults: DeviceSettings = DeviceSettings()
    devices: tuple[str, ...] = ()


class RolloutPolicy(Frozen):
    canary: Count | None = pydantic.Field(
        default=1, description="first wave: this many devices (or %) of each target profile")
    waves: tuple[Count, ...] = pydantic.Field(
        default=("10%", "50%", "100%"),
        description="wave sizes after the canary, Ansible `serial` semantics: percentages of "
                    "the whole fleet, the last size repeats until every device is done")
    concurrency: int = pydantic.Field(default=8, ge=1, description="devices at once in a wave "
                                      "(and read at once by `fleet status`)")
    max_fail: Count = pydantic.Field(
        default=0, description="failed devices a wave may have (count or % of the wave); more "
                               "halts the rollout. Unreachable devices count as failed")
    max_p90_ratio: float | None = pydantic.Field(
        default=1.25, gt=1, description="latency gate: new p90 / replaced release's p90 on the "
                                        "same device; null disables the gate")
    gate_repetitions: int = pydantic.Field(default=50, ge=4, description="measured calls "
                                           "per release, over all rounds")
    gate_rounds: int = pydantic.Field(default=5, ge=1)
    gate_round_s: float = pydantic.Field(default=0.2, gt=0, le=60,
                                         description="shortest benchmark round per release")
    gate_threads: int | None = pydantic.Field(
        default=None, ge=1, description="latency gate's thread count; unset: each release in "
                                         "its own tuned runtime configuration (untuned: 1)")
    gate_shared_cpus: bool = pydantic.Field(
        default=False, description="also gate devices whose CPUs are this machine's (`edgekit "
        "lab` and local: devices): their timings include the controller's own load, so by "
        "default their gate is skipped with a note")
    rollback_on_halt: Literal["none", "wave", "all"] = "none"

    @pydantic.field_validator("canary")
    @classmethod
    def _canary(cls, value: Count | None) -> Count | None:
        return None if value is None else _check_count(value, allow_zero=False)

    @pydantic.field_validator("waves")
    @classmethod
    def _waves(cls, value: tuple[Count, ...]) -> tuple[Count, ...]:
        if not value:
            raise ValueError("give at least one wave size, e.g. ['100%']")
        return tuple(_check_count(v, allow_zero=False) for v in value)

    @pydantic.field_validator("max_fail")
    @classmethod
    def _max_fail(cls, value: Count) -> Count:
        return _check_count(value, allow_zero=True)


class FleetFile(Frozen):
    defaults: DeviceSettings = DeviceSettings()
    groups: dict[str, GroupSpec] = pydantic.Field(default_factory=dict)
    devices: dict[str, DeviceSettings]
    rollout: RolloutPolicy = RolloutPolicy()
    hooks: Hooks = Hooks()


class FleetDevice(Frozen):
    """One device, every setting resolved."""

    name: str
    address: str             # user@host:port, or local:DIR
    identity: str
    target: str
    labels: dict[str, str] = {}
    groups: tuple[str, ...] = ()
    lab: bool = False        # its CPUs are this machine's (an `edgekit lab` or local: device)


class Fleet(Frozen):
    source: str
    devices: tuple[FleetDevice, ...]
    rollout: RolloutPolicy = RolloutPolicy()
    hooks: Hooks = Hooks()

    def select(self, limit: str | None) -> "Fleet":
        """Only the devices a `--limit` names: a device or group name, or label=value."""
        if not limit:
            return self
        key, eq, value = limit.partition("=")
        chosen = tuple(d for d in self.devices
                       if (d.labels.get(key) == value if eq
                           else limit == d.name or limit in d.groups))
        if not chosen:
            raise ConfigError(f"--limit {limit!r} matches no device of the fleet", key="limit",
                              hint="give a device name, a group name or label=value")
        return self.model_copy(update={"devices": chosen})


def load_fleet(path: str | Path) -> Fleet:
    """edgekit fleet YAML, or an Ansible inventory (INI, or YAML with `all:` / `hosts:`)."""
    path = Path(path)
    if path.suffix.lower() in (".ini", ".cfg", "") or path.name in ("hosts", "inventory"):
        if path.is_file() and not path.read_text(errors="replace").lstrip().startswith(
                ("{", "defaults:", "devices:", "groups:", "rollout:", "hooks:")):
            return _from_ansible_ini(path)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise ConfigError("a fleet file must be a mapping of keys", where=doc.where(()))
    if "devices" not in doc.data and _looks_like_ansible_yaml(doc.data):
        return _from_ansible_yaml(doc)
    spec = validate(doc, FleetFile)
    return _resolve(doc, spec)


def _resolve(doc: YamlDoc, spec: FleetFile) -> Fleet:
    memberships: dict[str, list[str]] = {name: [] for name in spec.devices}
    for group, members in spec.groups.items():
        for i, name in enumerate(members.devices):
            if name not in spec.devices:
                raise ConfigError(f"group '{group}' lists unknown device '{name}'",
                                  where=doc.where(("groups", group, "devices", i)),
                                  key=f"groups.{group}.devices",
                                  hint=f"devices: {', '.join(spec.devices) or 'none'}")
            memberships[name].append(group)
    devices = []
    for name, own in spec.devices.items():
        layers = [spec.defaults, *(spec.groups[g].defaults for g in memberships[name]), own]
        merged: dict = {"labels": {}}
        for layer in layers:
            merged["labels"].update(layer.labels)
            merged.update({k: v for k, v in layer.model_dump(exclude={"labels"}).items()
                           if v is not None})
        devices.append(_device(name, merged, tuple(memberships[name]),
                               where=doc.where(("devices", name)), base=doc.path.parent))
    if not devices:
        raise ConfigError("the fleet has no devices", where=doc.where(("devices",)),
                          key="devices")
    return Fleet(source=str(doc.path), devices=tuple(devices), rollout=spec.rollout,
                 hooks=spec.hooks)


def _device(name: str, settings: dict, groups: tuple[str, ...], where: str,
            base: Path) -> FleetDevice:
    try:
        safe_name(name, "device")
    except ConfigError as exc:
        raise ConfigError(exc.what, where=where, key=f"devices.{name}", hint=exc.hint) from None
    host = settings.get("host") or name
    registered = load_registry().get(host)
    lab = False
    try:
        local = local_root(host)
    except ConfigError as exc:
        raise ConfigError(exc.what, where=where, key=f"devices.{name}.host",
                          hint=exc.hint) from None
    if local is not None:  # this machine's directory: its CPUs are this machine's, no key
        address, identity, lab = f"{LOCAL_SCHEME}{base / local}", "", True
    elif registered and not settings.get("user") and not settings.get("port"):
        address = _address_text(parse_address(registered.address))
        identity = settings.get("identity") or registered.identity
        lab = registered.lab
    else:
        try:
            address = _address_text(parse_address(f"{settings.get('user') or 'root'}@{host}:"
                                                   f"{settings.get('port') or 22}"))
        except ConfigError as exc:
            raise ConfigError(exc.what, where=where, key=f"devices.{name}.host",
                              hint=exc.hint) from None
        identity = settings.get("identity") or _default_identity()
    if not settings.get("target"):
        raise ConfigError(f"device '{name}' has no target profile", where=where,
                          key=f"devices.{name}.target",
                          hint="set `target:` on the device, one of its groups or `defaults`")
    if identity:
        key = Path(identity).expanduser()
        identity = str(key if key.is_absolute() else base / key)
    target = settings["target"]
    if target.endswith((".yaml", ".yml")) and not Path(target).is_absolute():
        target = str(base / target)   # a profile file next to the fleet file
    return FleetDevice(name=name, address=address, identity=identity, target=target,
                       labels=dict(settings.get("labels", {})), groups=groups, lab=lab)


def _address_text(address: DeviceAddress) -> str:
    return f"{address.user}@{address.host}:{address.port}"


def _default_identity() -> str:
    for candidate in ("id_ed25519", "id_ecdsa", "id_rsa"):
        path = Path.home() / ".ssh" / candidate
        if path.is_file():
            return str(path)
    return str(Path.home() / ".ssh" / "id_ed25519")


# --- Ansible inventories ----------------------------------------------------------------------
# Host variables edgekit reads: ansible_host, ansible_port, ansible_user,
# ansible_ssh_private_key_file (or ansible_private_key_file) and edgekit_target; every group a
# host is in (transitively, through `children`) becomes one of its groups.

_ANSIBLE_KEYS = {"ansible_host": "host", "ansible_port": "port", "ansible_user": "user",
                 "ansible_ssh_private_key_file": "identity",
                 "ansible_private_key_file": "identity", "edgekit_target": "target"}


def _looks_like_ansible_yaml(data: dict) -> bool:
    return "all" in data or any(isinstance(v, dict) and ({"hosts", "children"} & set(v))
                                for v in data.values())


def _from_ansible_yaml(doc: YamlDoc) -> Fleet:
    hosts: dict[str, dict] = {}
    where: dict[str, str] = {}

    def mapping(value: object, loc: tuple) -> dict:
        """An inventory section (`hosts`, `children`, `vars`, a host's vars): a mapping or
        empty, else a one-line error naming where."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"'{loc[-1]}' must be a mapping", where=doc.where(loc),
                              key=str(loc[-1]))
        return value

    def walk(name: str, group: object, loc: tuple, chain: list[tuple[str, dict]]) -> None:
        group = group or {}
        if not isinstance(group, dict):
            raise ConfigError(f"group '{name}' must be a mapping", where=doc.where(loc), key=name)
        chain = [*chain, (name, mapping(group.get("vars"), (*loc, "vars")))]
        for host, host_vars in mapping(group.get("hosts"), (*loc, "hosts")).items():
            entry = hosts.setdefault(str(host), {"vars": {}, "groups": [], "own": {}})
            where.setdefault(str(host), doc.where((*loc, "hosts", host)))
            for group_name, group_vars in chain:   # parents first: the child's vars win
                entry["vars"].update(group_vars)
                if group_name not in ("all", "ungrouped") and group_name not in entry["groups"]:
                    entry["groups"].append(group_name)
            entry["own"].update(mapping(host_vars, (*loc, "hosts", host)))
        for child, child_group in mapping(group.get("children"), (*loc, "children")).items():
            walk(str(child), child_group, (*loc, "children", child), chain)

    for name, group in doc.data.items():
        walk(str(name), group, (name,), [])
    for entry in hosts.values():
        entry["vars"].update(entry["own"])
    return _fleet_from_hosts(hosts, where, str(doc.path), doc.path.parent)


def _from_ansible_ini(path: Path) -> Fleet:
    hosts: dict[str, dict] = {}
    where: dict[str, str] = {}
    group_vars: dict[str, dict] = {}
    children: dict[str, list[str]] = {}
    members: dict[str, list[str]] = {}
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError("unterminated section header", where=f"{path}:{number}")
            section, _, kind = line[1:-1].partition(":")
            kind = kind or "hosts"
            if kind not in ("hosts", "vars", "children"):
                raise ConfigError(f"unknown section kind ':{kind}'", where=f"{path}:{number}",
                                  hint="expected [group], [group:vars] or [group:children]")
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ConfigError(f"cannot parse line: {exc}", where=f"{path}:{number}") from None
        if kind == "children":
            children.setdefault(section, []).append(words[0])
        elif kind == "vars":
            key, eq, value = line.partition("=")
            if not eq:
                raise ConfigError("expected key=value", where=f"{path}:{number}")
            group_vars.setdefault(section, {})[key.strip()] = value.strip().strip("'\"")
        else:
            host_vars = {}
            for word in words[1:]:
                key, eq, value = word.partition("=")
                if not eq:
                    raise ConfigError(f"expected key=value, got {word!r}",
                                      where=f"{path}:{number}", key=words[0])
                host_vars[key] = value
            entry = hosts.setdefault(words[0], {"vars": {}, "groups": [], "own": {}})
            entry["own"].update(host_vars)
            where.setdefault(words[0], f"{path}:{number}")
            members.setdefault(section, []).append(words[0])

    def ancestors(group: str) -> list[str]:
        found = [g for g, kids in children.items() if group in kids]
        return [a for g in found for a in [*ancestors(g), g]]

    for group, names in members.items():
        for name in names:
            entry = hosts[name]
            for g in [*ancestors(group), group]:
                if g not in ("ungrouped", "all") and g not in entry["groups"]:
                    entry["groups"].append(g)
    for entry in hosts.values():
        merged = dict(group_vars.get("all", {}))
        for g in entry["groups"]:
            merged.update(group_vars.get(g, {}))
        merged.update(entry["own"])
        entry["vars"] = merged
    return _fleet_from_hosts(hosts, where, str(path), path.parent)


def _fleet_from_hosts(hosts: dict[str, dict], where: dict[str, str], source: str,
                      base: Path) -> Fleet:
    if not hosts:
        raise ConfigError("the inventory has no hosts", where=f"{source}:1")
    devices = []
    for name, entry in hosts.items():
        settings = {_ANSIBLE_KEYS[k]: str(v) for k, v in entry["vars"].items()
                    if k in _ANSIBLE_KEYS}
        labels = {k.removeprefix("edgekit_label_"): str(v) for k, v in entry["vars"].items()
                  if k.startswith("edgekit_label_")}
        if "port" in settings and not settings["port"].isdigit():
            raise ConfigError(f"ansible_port is not a number: {settings['port']!r}",
                              where=where[name], key=name)
        devices.append(_device(safe_device_name(name), {**settings, "labels": labels},
                               tuple(entry["groups"]), where=where[name], base=base))
    return Fleet(source=source, devices=tuple(devices))


def safe_device_name(name: str) -> str:
    """Ansible host names may be FQDNs or addresses; edgekit names allow those characters."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64]


def fleet_json_schema() -> dict:
    schema = FleetFile.model_json_schema()
    schema["title"] = "edgekit fleet"
    return schema


# INI inventories are parsed by hand: Ansible's format has bare host lines with space-separated
# key=value pairs, which configparser cannot read.
__all__ = ["Fleet", "FleetDevice", "Hooks", "RolloutPolicy", "load_fleet", "fleet_json_schema"]
