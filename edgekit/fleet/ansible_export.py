"""`edgekit fleet export-ansible`: the same staged rollout as `edgekit fleet update`, written
as an Ansible playbook + inventory for fleets that Ansible already manages.

The same bundles (release directories with SHA256SUMS and run.env) and the same device-side
programs (the runtime tools and the verify/run/activate/hook shims) go into the export. One
play per wave, in the waves `edgekit fleet update` would run (a canary per board first, which
one `serial:` list over a mixed inventory cannot express); each play's `max_fail_percentage`
is set so that it trips exactly when the wave's failures exceed `max_fail` (Ansible stops the
playbook when a play breaks). Per device, the steps of `edgekit deploy`: verify signature and
checksums in staging, put the release in place, run every validation sample from its own
directory, compare the outputs on the controller (`edgekit fleet check-outputs`), journal
`validated` or `rejected` on the device (what `edgekit fleet status` shows), activate, run the
hooks, prune; any failure puts the previous release back on that device (block/rescue). The latency
gate and the rollback of other devices on a halt stay with `edgekit fleet update`. Host keys:
the playbook trusts only edgekit's pinned keys.

Cost (measured on x86_64 lab devices, docs/how-to/fleets.md): Ansible's `copy` of a directory costs
six SSH sessions and two Python module runs *per file*, and each task at least one session;
the first export copied ~20 files in four directory copies and ran 15 tasks: a wave of 8
devices took 122 s (98 s of it copying) against 8.6 s for `fleet update`. Here a device gets at
most two archives, each a self-extracting shell program run by `script` (the runtime only when
its tools differ, the release with its shims and signers only when it is not already there,
verified), edgekit's device-side steps are one `raw` session each (ansible_steps/*.sh: no
Python module, no temp dir), and the outputs come back as one tar: 14.4 s for that wave.

Nothing from the fleet or recipe files is evaluated by Ansible: the inventory is YAML (each
value one quoted scalar; identity paths are plain path characters), hook commands are written
as octal escapes that the device decodes (Jinja in them reaches the device's shell as text),
and the device-side programs are written inside `{% raw %}`. What a device prints back is
used only on that device, or looked up in a table (its arch), never as a controller path.

`--out` is edgekit's: `.edgekit-export.json` lists every file an export wrote, with its
sha256. Another export may replace those files (unchanged since) and nothing else; a folder
holding anything else where the export writes is refused. `outputs/`, where the playbook
fetches device outputs to, is the playbook's and is left alone.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from edgekit.config.address import parse_address, safe_name
from edgekit.config.fleet import load_fleet
from edgekit.config.paths import known_hosts_path
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.device import layout
from edgekit.device.deploy import HOOK_GRACE_S, release_extras, release_id
from edgekit.device.probe import SHIMS
from edgekit.device.provision import SHIM_FILES, TOOLS, runtime_tools, shim_version
from edgekit.device.trust import check_signature
from edgekit.errors import ConfigError
from edgekit.fleet.rollout import merged_hooks
from edgekit.fleet.waves import plan_waves
from edgekit.models.bundle import MANIFEST, Bundle, sha256_file
from edgekit.toolchain.signing import trusted_signers

MARKER = ".edgekit-export.json"
WRITTEN = ("ansible.cfg", "inventory.yml", "rollout.yml")   # + everything under files/
FILES = "files"
OUTPUTS = "outputs"       # the playbook's: device outputs fetched for the comparison
STEPS = Path(__file__).with_name("ansible_steps")
INCOMING = f"{layout.ROOT}/.incoming-ansible"    # where the two archives land on the device
KEEP_RELEASES = 3     # activated releases kept on a device, as `edgekit fleet update --keep`


@dataclass(frozen=True)
class AnsibleExport:
    directory: Path
    playbook: Path
    inventory: Path

    @property
    def config(self) -> Path:
        return self.directory / "ansible.cfg"

    def command(self) -> str:
        """The shell command that runs the export from any directory: Ansible reads an
        ansible.cfg only from the working directory or ANSIBLE_CONFIG, and without ours it
        neither knows the pinned host keys nor the forks."""
        return (f"ANSIBLE_CONFIG={shlex.quote(str(self.config))} ansible-playbook -i "
                f"{shlex.quote(str(self.inventory))} {shlex.quote(str(self.playbook))}")


@dataclass(frozen=True)
class _Release:
    release: str
    folder: str           # files/releases/<folder>, files/payload/<folder>.run
    samples: int          # validation samples (the golden one first)


def export_ansible(fleet_path: Path, recipe_path: Path, out: Path,
                   build_for: Callable[[str], Bundle],
                   limit: str | None = None) -> AnsibleExport:
    """Write the playbook, inventory and release files into `out` (new, empty, or written by
    an earlier export and unchanged since); `build_for` gives the recipe's bundle for each
    target profile in the fleet."""
    fleet = load_fleet(fleet_path).select(limit)
    recipe = load_recipe(recipe_path)
    hooks = merged_hooks(recipe, fleet)
    policy = fleet.rollout
    owned = _owned_files(out)          # before anything is built: refuse early
    for device in fleet.devices:
        _inventory_identity(device, fleet.source)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".edgekit-export-", dir=out))
    try:
        files = staging / FILES
        releases: dict[str, _Release] = {}
        arches: set[str] = set()
        version = ""
        for index, target in enumerate(dict.fromkeys(d.target for d in fleet.devices)):
            bundle = build_for(target)
            check_signature(bundle)
            folder = f"{index}-{safe_name(Path(target).stem, 'target')}"
            _write_release(bundle, files / "releases" / folder)
            _write_carrier(files / "payload" / f"{folder}.run", "payload.tar.gz",
                           _payload_members(files / "releases" / folder))
            releases[target] = _Release(release_id(bundle), folder,
                                        1 + len(bundle.manifest.more_golden))
            version = bundle.manifest.compiler_version
            arch = load_target(target).arch
            arches |= {"x86_64", "aarch64"} if arch == "any" else {arch}
        runtime_sums = []
        for arch in sorted(arches):
            tools = runtime_tools(arch, version)
            _write_carrier(files / "runtime" / f"iree-{version}-{arch}.run", "runtime.tar.gz",
                           [(tools / tool, tool, 0o755) for tool in TOOLS])
            runtime_sums += [f"{arch} {sha256_file(tools / tool)}  {tool}" for tool in TOOLS]

        waves = plan_waves(fleet.devices, lambda d: d.target, policy.canary, policy.waves)
        _write_inventory(staging / "inventory.yml", waves, releases, fleet.source)
        _write_config(staging / "ansible.cfg", policy.concurrency)
        device = _DeviceSide(app=recipe.name, version=version, arches=sorted(arches),
                             runtime_sums="\n".join(runtime_sums))
        plays = [_play(device, number, len(wave), policy.max_fail, hooks)
                 for number, wave in enumerate(waves, start=1)]
        (staging / "rollout.yml").write_text(
            f"# edgekit rollout of {recipe.name}: {len(waves)} wave(s), written by "
            "`edgekit fleet export-ansible`\n" +
            yaml.dump(plays, Dumper=_PlaybookDumper, sort_keys=False, width=100))
        _commit(staging, out, owned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return AnsibleExport(out, out / "rollout.yml", out / "inventory.yml")


# --- --out belongs to edgekit: what it wrote, and nothing else, may be replaced -------------

def _listing(out: Path) -> list[str]:
    """Every non-directory entry under `out` (symlinks included, never followed), relative;
    the marker, the playbook's outputs/ and a killed export's staging left out."""
    found = []
    for root, dirs, names in os.walk(out):
        here = Path(root)
        if here == out:
            dirs[:] = [d for d in dirs if d != OUTPUTS and not d.startswith(".edgekit-export-")]
        links = [d for d in dirs if (here / d).is_symlink()]
        found += [(here / n).relative_to(out).as_posix() for n in [*names, *links]]
    return sorted(p for p in found if p != MARKER)


def _ours(relative: str) -> bool:
    return relative in WRITTEN or relative.startswith(f"{FILES}/") or relative == FILES


def _owned_files(out: Path) -> dict[str, str]:
    """What an earlier export wrote into `out` ({path: sha256}); ConfigError if `out` holds
    anything else where an export writes, or a file edgekit wrote was changed since."""
    if not out.exists():
        return {}
    if not out.is_dir():
        raise ConfigError(f"{out} is not a directory", key="--out",
                          hint="give a new or empty directory for the export")
    for leftover in out.glob(".edgekit-export-*"):      # a killed export's own staging
        shutil.rmtree(leftover, ignore_errors=True)
    present = [p for p in _listing(out) if _ours(p)]
    marker = out / MARKER
    owned: dict[str, str] = {}
    complete = True
    if marker.is_file() and not marker.is_symlink():
        try:
            data = json.loads(marker.read_text())
            owned = {str(k): str(v) for k, v in data["files"].items()}
            complete = bool(data.get("complete", True))
        except (ValueError, KeyError, AttributeError, TypeError, OSError):
            raise ConfigError(f"{marker} is not an edgekit export's file list", key="--out",
                              hint=f"remove {out} yourself, or choose another directory"
                              ) from None
    elif present:
        raise ConfigError(f"{out} holds files edgekit did not write ({_few(present)}); "
                          "refusing to overwrite them", key="--out",
                          hint="give a new or empty directory, or one an earlier "
                               "`edgekit fleet export-ansible` wrote")
    foreign = [p for p in present if p not in owned]
    if foreign:
        raise ConfigError(f"{out} holds files an earlier export did not write "
                          f"({_few(foreign)}); refusing to overwrite them", key="--out",
                          hint=f"move them out of {out}, or choose another directory")
    changed = [p for p in present if complete and
               ((out / p).is_symlink() or not (out / p).is_file()
                or sha256_file(out / p) != owned[p])]
    if changed:
        raise ConfigError(f"{out}: {_few(changed)} changed since edgekit wrote "
                          f"{'it' if len(changed) == 1 else 'them'}; refusing to overwrite",
                          key="--out", hint=f"keep your copy elsewhere, or remove it from "
                                            f"{out}, then export again")
    return owned


def _few(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def _commit(staging: Path, out: Path, owned: dict[str, str]) -> None:
    """Replace the earlier export's files with `staging`'s. The marker names both sets while
    files move (a crash leaves only files edgekit wrote), then the new set."""
    new = {p: sha256_file(staging / p) for p in _listing(staging)}
    _write_marker(out, {**owned, **new}, complete=False)
    for relative in owned:
        if relative not in new:
            (out / relative).unlink(missing_ok=True)
    for relative in new:
        (out / relative).parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / relative, out / relative)
    for root, _, _ in sorted(os.walk(out / FILES), key=lambda w: len(w[0]), reverse=True):
        if not os.listdir(root):       # folders of releases the new export does not have
            os.rmdir(root)
    _write_marker(out, new, complete=True)


def _write_marker(out: Path, files: dict[str, str], complete: bool) -> None:
    tmp = out / f"{MARKER}.tmp"
    tmp.write_text(json.dumps({"written_by": "edgekit fleet export-ansible",
                               "complete": complete, "files": dict(sorted(files.items()))},
                              indent=1) + "\n")
    os.replace(tmp, out / MARKER)


# --- what goes to the devices ----------------------------------------------------------------

def _write_release(bundle: Bundle, into: Path) -> None:
    """The release directory exactly as `edgekit deploy` uploads it (the controller compares
    outputs against it; the payload archive carries it to the devices)."""
    for rel in [*bundle.manifest.files, MANIFEST]:
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bundle.file(rel), into / rel)
    with tempfile.TemporaryDirectory(prefix="edgekit-extras-") as tmp:
        for path in release_extras(bundle, Path(tmp)):
            shutil.copy2(path, into / path.name)


def _payload_members(release: Path) -> list[tuple[Path, str, int]]:
    """release/… (the release directory), shims/… (the device-side programs of this shim
    version) and allowed_signers (what verify.sh trusts): one archive, one copy per device."""
    members = [(p, f"release/{p.relative_to(release).as_posix()}", 0o644)
               for p in sorted(release.rglob("*")) if p.is_file()]
    members += [(SHIMS / name, f"shims/{name}", 0o755) for name in SHIM_FILES]
    members.append((trusted_signers(), "allowed_signers", 0o644))
    return members


def _write_carrier(path: Path, name: str, members: Iterable[tuple[Path, str, int]]) -> None:
    """A shell program carrying a .tar.gz of regular files (no directories, links or owners;
    the same inputs give the same bytes): run by Ansible's `script` module, it writes the
    archive to INCOMING/`name` on the device. `script` sends one file without a Python module
    on the device; `copy` costs a stat and a copy module run, and more SSH sessions."""
    archive = io.BytesIO()
    # level 6, not gzip's default 9: the IREE runtime tools (4 MB) pack 3× faster for an
    # archive 0.5 % larger (an export took 1.4 s, 85 % of it compressing at level 9)
    with gzip.GzipFile(fileobj=archive, mode="wb", mtime=0, compresslevel=6) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for source, member, mode in members:
            info = tarfile.TarInfo(member)
            info.size = source.stat().st_size
            info.mode = mode
            info.mtime = int(source.stat().st_mtime)
            with source.open("rb") as f:
                tar.addfile(info, f)
    head = ("#!/bin/sh\n"
            "# written by `edgekit fleet export-ansible`: the archive after the line `exit 0`\n"
            "set -eu\n"
            'cd "$HOME"\n'
            f"mkdir -p {INCOMING}\n"
            f'tail -c +{{offset:010d}} "$0" > {INCOMING}/{name}.partial\n'
            f"mv -f {INCOMING}/{name}.partial {INCOMING}/{name}\n"
            "exit 0\n")
    offset = len(head.format(offset=0).encode()) + 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head.format(offset=offset).encode() + archive.getvalue())


def _write_inventory(path: Path, waves, releases: dict[str, _Release], source: str) -> None:
    groups = {}
    for number, wave in enumerate(waves, start=1):
        hosts = {}
        for d in wave:
            address = parse_address(d.address)
            release = releases[d.target]
            hosts[safe_name(d.name, "device")] = {
                "ansible_host": address.host, "ansible_port": address.port,
                "ansible_user": address.user,
                "ansible_ssh_private_key_file": _inventory_identity(d, source),
                "edgekit_release": release.release, "edgekit_release_src": release.folder,
                "edgekit_samples": release.samples}
        groups[f"edgekit_wave_{number}"] = {"hosts": hosts}
    # YAML, not INI: every value is one quoted scalar, so none can add a variable
    path.write_text("# written by `edgekit fleet export-ansible`\n" + yaml.safe_dump(
        {"all": {"children": {"edgekit_fleet": {"children": groups}}}}, sort_keys=False))


def _write_config(path: Path, forks: int) -> None:
    path.write_text(
        "[defaults]\n"
        "inventory = inventory.yml\n"
        f"forks = {forks}\n"
        "host_key_checking = True\n"
        "interpreter_python = auto_silent\n"
        "retry_files_enabled = False\n"
        "[ssh_connection]\n"
        # modules through the SSH session's stdin (no temp file per module); the connection
        # shared by every task of a device (one TCP and key exchange, not one per session)
        "pipelining = True\n"
        "ssh_args = -o ControlMaster=auto -o ControlPersist=120s "
        f"-o UserKnownHostsFile={known_hosts_path()} -o StrictHostKeyChecking=yes "
        "-o ForwardAgent=no -o IdentitiesOnly=yes\n")


# An identity path goes into the inventory, whose values Ansible templates: plain path
# characters only, so it can neither add a variable nor hold a Jinja expression.
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._/~+@-][A-Za-z0-9._/~+@:,-]*$")


def _inventory_identity(device, source: str) -> str:
    if not _PLAIN_PATH.match(device.identity):
        raise ConfigError(f"identity {device.identity!r} cannot be written to an Ansible "
                          "inventory", where=source, key=f"devices.{device.name}.identity",
                          hint="use a key path of letters, digits and . _ - / ~ + @ : , "
                               "(no spaces, '=', quotes or braces)")
    return device.identity


class _PlaybookDumper(yaml.SafeDumper):
    pass


def _block(value: str) -> str | None:
    return "|" if "\n" in value else None   # programs read as programs, not escaped lines


_PlaybookDumper.add_representer(
    str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value,
                                                       style=_block(value)))


# --- the playbook ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _DeviceSide:
    app: str
    version: str
    arches: list[str]
    runtime_sums: str          # "<arch> <sha256>  <tool>" lines

    @property
    def app_dir(self) -> str:
        return layout.app_dir(self.app)

    @property
    def shims(self) -> str:
        return layout.shims_dir(shim_version())

    @property
    def runtime_prefix(self) -> str:
        """layout.runtime_dir(version, arch) without the arch, which the device tells."""
        return layout.runtime_dir(self.version, "arch").removesuffix("arch")

    def step(self, name: str, *constants: str, templated: tuple[str, ...] = ()) -> str:
        """A `raw` command running ansible_steps/NAME.sh (`sh -s`, the program on stdin as a
        here-document): the program and the export's constants inside {% raw %} (never
        templated), the per-device values as Jinja expressions, each `| quote`d."""
        words = " ".join(shlex.quote(c) for c in constants)
        values = "".join(f" {{{{ {expression} | quote }}}}" for expression in templated)
        return ("{% raw %}sh -s -- " + words + "{% endraw %}" + values +
                " <<'EDGEKIT_STEP'\n{% raw %}" + _program(name) + "EDGEKIT_STEP{% endraw %}")


def _program(name: str) -> str:
    """ansible_steps/NAME.sh without its header comment (the file is the documentation)."""
    lines = (STEPS / f"{name}.sh").read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def _octal(command: str | None) -> str:
    """A hook command as `printf %b` reads it back, byte for byte (switch.sh): digits and
    backslashes only, so no Jinja, quoting or YAML can change the user's text on its way."""
    return "".join(f"\\0{byte:03o}" for byte in (command or "").encode())


def _shim_sums() -> str:
    return "\n".join(f"{sha256_file(SHIMS / name)}  {name}" for name in SHIM_FILES)


def _max_fail_percentage(max_fail, wave_size: int) -> float:
    """Ansible breaks a play when failed/size > percentage/100; pick the percentage halfway
    between the allowed count and one more, so float rounding cannot move the boundary."""
    if isinstance(max_fail, str):
        return float(max_fail[:-1])
    return min(100.0, round(100 * (int(max_fail) + 0.5) / wave_size, 3))


def _play(device: _DeviceSide, number: int, size: int, max_fail, hooks) -> dict:
    d = device
    outputs_tar = "{{ playbook_dir }}/" + OUTPUTS + \
        "/{{ inventory_hostname }}/{{ edgekit_release }}.tar"
    state = d.step("state", d.app_dir, d.shims, d.runtime_prefix, _shim_sums(),
                   sha256_file(trusted_signers()), d.runtime_sums,
                   templated=("edgekit_release",))
    steps = [
        {"name": "send the IREE runtime tools (absent or different on the device)",
         "ansible.builtin.script": {"cmd": "{{ edgekit_runtimes[edgekit.arch] | quote }}",
                                    "executable": "sh"},
         "when": "not edgekit.runtime"},
        {"name": "send the release, shims and trusted signers (one archive)",
         "ansible.builtin.script": {"cmd": "{{ (playbook_dir ~ '/files/payload/' ~ "
                                           "edgekit_release_src ~ '.run') | quote }}",
                                    "executable": "sh"},
         "when": "not edgekit.payload"},
        {"name": "verify, put in place and run the validation samples on the device",
         "ansible.builtin.raw": d.step("install", d.app_dir, d.shims, d.runtime_prefix,
                                       templated=("edgekit_samples", "edgekit_release",
                                                  "edgekit.arch"))},
        {"name": "fetch the outputs",
         "ansible.builtin.fetch": {"src": "{{ edgekit.home }}/" + d.app_dir +
                                          "/.validation-ansible-{{ edgekit_release }}.tar",
                                   "dest": outputs_tar, "flat": True}},
        {"name": "compare with the golden outputs (on the controller)",
         "ansible.builtin.command": {"argv": [
             "edgekit", "fleet", "check-outputs",
             "{{ playbook_dir }}/files/releases/{{ edgekit_release_src }}", outputs_tar]},
         "delegate_to": "localhost", "register": "edgekit_check", "changed_when": False},
        {"name": "journal the validation, activate (atomic rename of `current`), run the hooks",
         "ansible.builtin.raw": d.step("switch", d.app_dir, d.shims, f"{hooks.timeout_s:g}",
                                       str(KEEP_RELEASES), _octal(hooks.after_activate),
                                       _octal(hooks.health),
                                       templated=("edgekit_release", "edgekit.previous")),
         **({"timeout": int(2 * (hooks.timeout_s + HOOK_GRACE_S))}
            if hooks.after_activate or hooks.health else {})},
    ]
    rescue = [
        {"name": "journal a rejected release, put the previous release back",
         "ansible.builtin.raw": d.step(
             "rescue", d.app_dir, d.shims,
             templated=("edgekit_release", "edgekit.previous",
                        "'yes' if (edgekit_check.rc | default(0)) == 8 else 'no'"))},
        {"name": "fail this device", "ansible.builtin.fail": {
            "msg": "edgekit: '{{ ansible_failed_task.name }}' failed on {{ inventory_hostname }}"
                   "; its previous release is current"}}]
    return {
        "name": f"edgekit rollout of {d.app}: wave {number} ({size} device(s))",
        "hosts": f"edgekit_wave_{number}",
        "gather_facts": False,
        "max_fail_percentage": _max_fail_percentage(max_fail, size),
        "vars": {
            "edgekit": "{{ edgekit_state.stdout | from_json }}",
            "edgekit_runtimes": {arch: f"{{{{ playbook_dir }}}}/files/runtime/"
                                       f"iree-{d.version}-{arch}.run" for arch in d.arches},
        },
        "tasks": [
            {"name": "what the device has (arch, current release, runtime, release)",
             "ansible.builtin.raw": state, "register": "edgekit_state", "changed_when": False},
            {"name": "deploy, validate, activate", "block": steps, "rescue": rescue},
        ]}
