"""`edgekit fleet export-ansible`: the same staged rollout as `edgekit fleet update`, written
as an Ansible playbook + inventory for fleets that Ansible already manages.

The same bundles (release directories with SHA256SUMS and run.env) and the same device-side
programs (the runtime tools and the verify/run/activate shims) are copied into the export.
One play per wave, in the waves `edgekit fleet update` would run (a canary per board first,
which one `serial:` list over a mixed inventory cannot express); each play's
`max_fail_percentage` is set so that it trips exactly when the wave's failures exceed
`max_fail` (Ansible stops the playbook when a play breaks). Per device: verify checksums,
run the golden inputs, compare the outputs on the controller with `edgekit fleet
check-outputs`, activate, run the hooks; any failure puts the previous release back on that
device (block/rescue). The latency gate and the rollback of other devices on a halt stay
with `edgekit fleet update`. Host keys: the playbook trusts only edgekit's pinned keys.

Nothing from the fleet or recipe files is evaluated by Ansible: the inventory is YAML (each
value one quoted scalar; identity paths are plain path characters) and hook commands are
written `!unsafe`, so Jinja in them reaches the device's shell as text.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from edgekit.config.fleet import load_fleet
from edgekit.config.paths import known_hosts_path
from edgekit.config.profiles import load_target
from edgekit.config.recipe import load_recipe
from edgekit.device import layout
from edgekit.device.deploy import release_extras, release_id
from edgekit.device.provision import SHIM_FILES, TOOLS, runtime_tools, shim_version
from edgekit.device.probe import SHIMS
from edgekit.device.trust import DEVICE_SIGNERS, check_signature
from edgekit.fleet.rollout import merged_hooks
from edgekit.fleet.waves import plan_waves
from edgekit.models.bundle import MANIFEST, Bundle
from edgekit.toolchain.signing import trusted_signers
from edgekit.config.address import parse_address, safe_name
from edgekit.errors import ConfigError


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
        import shlex
        return (f"ANSIBLE_CONFIG={shlex.quote(str(self.config))} ansible-playbook -i "
                f"{shlex.quote(str(self.inventory))} {shlex.quote(str(self.playbook))}")


def export_ansible(fleet_path: Path, recipe_path: Path, out: Path,
                   build_for: Callable[[str], Bundle],
                   limit: str | None = None) -> AnsibleExport:
    """Write the playbook, inventory and release files; `build_for` gives the recipe's bundle
    for each target profile in the fleet."""
    fleet = load_fleet(fleet_path).select(limit)
    recipe = load_recipe(recipe_path)
    hooks = merged_hooks(recipe, fleet)
    policy = fleet.rollout
    out.mkdir(parents=True, exist_ok=True)
    files = out / "files"
    shutil.rmtree(files, ignore_errors=True)
    releases: dict[str, tuple[str, str]] = {}      # target → (release id, folder in files/)
    arches: set[str] = set()
    version = ""
    for index, target in enumerate(dict.fromkeys(d.target for d in fleet.devices)):
        bundle = build_for(target)
        check_signature(bundle)
        folder = f"releases/{index}-{safe_name(Path(target).stem, 'target')}"
        _write_release(bundle, files / folder)
        releases[target] = (release_id(bundle), folder)
        version = bundle.manifest.compiler_version
        arch = load_target(target).arch
        arches |= {"x86_64", "aarch64"} if arch == "any" else {arch}
    for arch in sorted(arches):
        dest = files / "runtime" / f"iree-{version}-{arch}" / "bin"
        dest.mkdir(parents=True)
        for tool in TOOLS:
            shutil.copy2(runtime_tools(arch, version) / tool, dest / tool)
    shims = files / "shims" / shim_version()
    shims.mkdir(parents=True)
    for name in SHIM_FILES:
        shutil.copy2(SHIMS / name, shims / name)
    shutil.copyfile(trusted_signers(), files / "allowed_signers")   # what verify.sh trusts

    waves = plan_waves(fleet.devices, lambda d: d.target, policy.canary, policy.waves)
    groups = {}
    for number, wave in enumerate(waves, start=1):
        hosts = {}
        for d in wave:
            address = parse_address(d.address)
            release, folder = releases[d.target]
            hosts[safe_name(d.name, "device")] = {
                "ansible_host": address.host, "ansible_port": address.port,
                "ansible_user": address.user,
                "ansible_ssh_private_key_file": _inventory_identity(d, fleet.source),
                "edgekit_release": release, "edgekit_release_src": folder}
        groups[f"edgekit_wave_{number}"] = {"hosts": hosts}
    inventory = out / "inventory.yml"
    # YAML, not INI: every value is one quoted scalar, so none can add a variable
    inventory.write_text("# written by `edgekit fleet export-ansible`\n" + yaml.safe_dump(
        {"all": {"children": {"edgekit_fleet": {"children": groups}}}}, sort_keys=False))
    (out / "ansible.cfg").write_text(
        "[defaults]\n"
        f"inventory = {inventory.name}\n"
        f"forks = {policy.concurrency}\n"
        "host_key_checking = True\n"
        "interpreter_python = auto_silent\n"
        "retry_files_enabled = False\n"
        "[ssh_connection]\n"
        "pipelining = True\n"
        # Ansible's default connection sharing, plus edgekit's pinned host keys only
        "ssh_args = -o ControlMaster=auto -o ControlPersist=60s "
        f"-o UserKnownHostsFile={known_hosts_path()} -o StrictHostKeyChecking=yes "
        "-o ForwardAgent=no -o IdentitiesOnly=yes\n")
    playbook = out / "rollout.yml"
    plays = [_play(recipe.name, number, len(wave), policy.max_fail, hooks, version)
             for number, wave in enumerate(waves, start=1)]
    playbook.write_text(f"# edgekit rollout of {recipe.name}: {len(waves)} wave(s), written by "
                        "`edgekit fleet export-ansible`\n" +
                        yaml.dump(plays, Dumper=_PlaybookDumper, sort_keys=False, width=100))
    return AnsibleExport(out, playbook, inventory)


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


class Unsafe(str):
    """A string Ansible must not template (written with the `!unsafe` tag): hook commands
    come from recipe and fleet files, and Jinja in them would run on the controller."""


class _PlaybookDumper(yaml.SafeDumper):
    pass


_PlaybookDumper.add_representer(
    Unsafe, lambda dumper, value: dumper.represent_scalar("!unsafe", str(value)))


def _write_release(bundle, into: Path) -> None:
    """The release directory exactly as `edgekit deploy` uploads it."""
    for rel in [*bundle.manifest.files, MANIFEST]:
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(bundle.file(rel), into / rel)
    with tempfile.TemporaryDirectory(prefix="edgekit-extras-") as tmp:
        for path in release_extras(bundle, Path(tmp)):
            shutil.copy2(path, into / path.name)


def _max_fail_percentage(max_fail, wave_size: int) -> float:
    """Ansible breaks a play when failed/size > percentage/100; pick the percentage halfway
    between the allowed count and one more, so float rounding cannot move the boundary."""
    if isinstance(max_fail, str):
        return float(max_fail[:-1])
    return min(100.0, round(100 * (int(max_fail) + 0.5) / wave_size, 3))


def _play(app: str, number: int, size: int, max_fail, hooks, version: str) -> dict:
    # paths relative to the login's home: commands run there (chdir), file modules get "~/"
    app_dir = layout.app_dir(app)
    release_dir = f"{app_dir}/releases/{{{{ edgekit_release }}}}"
    staging = f"{app_dir}/.staging-ansible"
    shims = layout.shims_dir(shim_version())
    runtime = f"{layout.ROOT}/runtime/iree-{version}-{{{{ edgekit_arch.stdout }}}}"
    outputs = f"{app_dir}/.validation-ansible"
    sh = {"chdir": "~"}
    hook_env = {"EDGEKIT_APP": app, "EDGEKIT_RELEASE": "{{ edgekit_release }}",
                "EDGEKIT_RELEASE_DIR": release_dir}
    steps = [
        {"name": "upload the release to staging",
         "ansible.builtin.copy": {"src": "files/{{ edgekit_release_src }}/",
                                  "dest": f"~/{staging}/"}},
        {"name": "verify every file against SHA256SUMS",
         "ansible.builtin.command": {"argv": ["sh", f"{shims}/verify.sh", staging], **sh}},
        {"name": "move the release into place",
         "ansible.builtin.shell": {"cmd": f'rm -rf "{release_dir}" && mkdir -p "{app_dir}/'
                                          f'releases" && mv -T "{staging}" "{release_dir}"',
                                   **sh}},
        {"name": "run the golden inputs on the device",
         "ansible.builtin.command": {"argv": ["sh", f"{shims}/run.sh", runtime, release_dir,
                                              outputs], **sh}},
        {"name": "list the outputs", "ansible.builtin.find": {"paths": f"~/{outputs}",
                                                              "patterns": ["output_*.npy",
                                                                           "output_*.bin"]},
         "register": "edgekit_outputs"},
        {"name": "fetch the outputs",
         "ansible.builtin.fetch": {"src": "{{ item.path }}", "dest":
                                   "outputs/{{ inventory_hostname }}/", "flat": True},
         "loop": "{{ edgekit_outputs.files }}", "loop_control": {"label": "{{ item.path }}"}},
        {"name": "compare with the golden outputs (on the controller)",
         "ansible.builtin.command": {"argv": ["edgekit", "fleet", "check-outputs",
                                              "files/{{ edgekit_release_src }}",
                                              "outputs/{{ inventory_hostname }}"]},
         "delegate_to": "localhost"},
        {"name": "activate (atomic rename of `current`)",
         "ansible.builtin.command": {"argv": ["sh", f"{shims}/activate.sh", app_dir,
                                              "{{ edgekit_release }}"], **sh},
         "when": "edgekit_previous.stdout | basename != edgekit_release"},
    ]
    for name, command in (("after_activate", hooks.after_activate), ("health", hooks.health)):
        if command:
            steps.append({"name": f"{name} hook", "ansible.builtin.shell":
                          {"cmd": Unsafe(command), **sh}, "environment": hook_env,
                          "timeout": int(hooks.timeout_s)})
    rescue = [
        {"name": "put the previous release back",
         "ansible.builtin.command": {"argv": ["sh", f"{shims}/activate.sh", app_dir,
                                              "{{ edgekit_previous.stdout | basename }}"], **sh},
         "when": "edgekit_previous.rc == 0"},
        {"name": "no previous release: no current release",
         "ansible.builtin.file": {"path": f"~/{app_dir}/current", "state": "absent"},
         "when": "edgekit_previous.rc != 0"},
        {"name": "fail this device", "ansible.builtin.fail": {
            "msg": "edgekit: '{{ ansible_failed_task.name }}' failed on {{ inventory_hostname }}"
                   "; its previous release is current"}}]
    return {
        "name": f"edgekit rollout of {app}: wave {number} ({size} device(s))",
        "hosts": f"edgekit_wave_{number}",
        "gather_facts": False,
        "max_fail_percentage": _max_fail_percentage(max_fail, size),
        "tasks": [
            {"name": "device arch", "ansible.builtin.command": {"argv": ["uname", "-m"]},
             "register": "edgekit_arch", "changed_when": False},
            {"name": "the release current before this rollout",
             "ansible.builtin.command": {"argv": ["readlink", f"{app_dir}/current"], **sh},
             "register": "edgekit_previous", "changed_when": False, "failed_when": False},
            {"name": "install the runtime tools",
             "ansible.builtin.copy": {"src": f"files/runtime/iree-{version}-"
                                             "{{ edgekit_arch.stdout }}/bin/",
                                      "dest": f"~/{runtime}/bin/", "mode": "0755"}},
            {"name": "install the device-side programs",
             "ansible.builtin.copy": {"src": f"files/shims/{shim_version()}/",
                                      "dest": f"~/{shims}/", "mode": "0755"}},
            {"name": "install the trusted bundle signers",
             "ansible.builtin.copy": {"src": "files/allowed_signers",
                                      "dest": f"~/{DEVICE_SIGNERS}", "mode": "0644"}},
            {"name": "deploy, validate, activate", "block": steps, "rescue": rescue,
             "always": [{"name": "clean up", "ansible.builtin.file": {"path": f"~/{outputs}",
                                                                       "state": "absent"}}]},
        ]}
