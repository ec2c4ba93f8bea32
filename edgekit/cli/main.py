"""The `edgekit` command. Each command parses, calls one edgekit function and renders.

Exit codes come from the class of the error a command raised (edgekit.errors, listed in
README.md's "Exit codes"); no command exits with a number of its own.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import shlex
import sys
import traceback
import warnings
from pathlib import Path

import click
from rich.markup import escape

from edgekit.cli import complete, render
from edgekit.cli import dry_run as dry_runs
from edgekit.cli.dry_run import DRY_RUN_HELP
from edgekit.errors import BenchRegression, EdgekitError, Interrupted, LoweringError, \
    NotBuildable, ValidationFailed


def handle_errors(fn):
    """Turn a command's exception into a message and the exit code of its class.

    An edgekit error is its message (what, where, hint). Any other exception is a bug or an
    unforeseen environment: one line, with the traceback written to a log file. `--debug` (or
    EDGEKIT_DEBUG=1) prints the traceback in both cases.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _changing_nothing()
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        try:
            return fn(*args, **kwargs)
        except EdgekitError as exc:
            render.err.print("[red]error:[/] " + escape(str(exc)), highlight=False, soft_wrap=True)
            if isinstance(exc, LoweringError) and exc.reproducer:
                    render.err.print(f"  reproducer: {escape(exc.reproducer)}", highlight=False)
            if _debug():
                _print_traceback(exc)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            # before click's "Aborted!" (exit 1): one line, the shell's 130
            exc = interrupted(_device_step, _command_path())
            render.err.print("[red]interrupted:[/] " + escape(str(exc)), highlight=False,
                             soft_wrap=True)
            sys.exit(exc.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors, --help, a declined confirm
        except Exception as exc:
            _report_unexpected(exc)
            sys.exit(EdgekitError.exit_code)  # "other error"
    return wrapper


# Commands that change no device, or that say when they start to (`_changing`): Ctrl-C in
# them says "nothing was changed on a device" unless a changing step was in flight.
NOTHING_CHANGED_UNLESS_SAID = frozenset({
    "build", "validate", "check", "schema", "targets list", "targets show", "targets derive",
    "probe", "releases", "devices list", "devices trust", "lab status", "bench compare",
    "bench history", "bench report", "completion", "toolchains list", "toolchains install",
    "deploy", "rollback", "provision"})
# The step that changes a device while it runs, and how to see what it left: Ctrl-C's line.
_device_step: tuple[str, str] | None = None
SWITCH_HINT = ("a release becomes current in one atomic rename: the device runs the release it "
               "ran before or the new one; `edgekit releases HOST --app APP` shows which")


def _changing(step: str, hint: str = SWITCH_HINT) -> None:
    global _device_step
    _device_step = (step, hint)


def _changing_nothing() -> None:
    global _device_step
    _device_step = None


def interrupted(step: tuple[str, str] | None, command: str) -> Interrupted:
    """What Ctrl-C stopped, as far as this process knows: `step` (what, hint) changes a device
    (None: none had started), `command` the subcommand's path ("deploy", "fleet update")."""
    if step is not None:
        return Interrupted(f"{step[0]} was in flight", hint=step[1])
    if command in NOTHING_CHANGED_UNLESS_SAID:
        return Interrupted("nothing was changed on a device")
    return Interrupted(f"`edgekit {command}` may have been changing a device",
                       hint="`edgekit releases HOST --app APP` shows what is current there")


def _command_path() -> str:
    ctx = click.get_current_context(silent=True)
    return ctx.command_path.partition(" ")[2] if ctx else ""


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().params.get("debug"))


def _print_traceback(exc: BaseException) -> None:
    sys.stderr.write("".join(traceback.format_exception(exc)))


def _report_unexpected(exc: Exception) -> None:
    kind = type(exc).__qualname__ if type(exc).__module__ == "builtins" else \
        f"{type(exc).__module__}.{type(exc).__qualname__}"
    lines = str(exc).strip().splitlines()
    render.err.print(f"[red]error:[/] {escape(kind)}" + (f": {escape(lines[0])}" if lines else ""),
                     highlight=False, soft_wrap=True)
    if _debug():
        _print_traceback(exc)
        return
    try:
        log = _write_traceback_log(exc)
    except OSError as log_exc:
        render.err.print(f"  (no log file: {escape(str(log_exc))}; the traceback follows)",
                         highlight=False)
        _print_traceback(exc)
        return
    render.err.print(f"  traceback: {escape(str(log))}\n  rerun with --debug for the traceback",
                     highlight=False, soft_wrap=True)


def _write_traceback_log(exc: Exception) -> Path:
    from edgekit.config.paths import logs_dir
    now = datetime.datetime.now()
    path = logs_dir() / f"edgekit-{now:%Y%m%d-%H%M%S}-{os.getpid()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = f"{now.isoformat(timespec='seconds')}: {' '.join(sys.argv)}\nPython {sys.version}\n\n"
    path.write_text(head + "".join(traceback.format_exception(exc)))
    return path


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgekit")
@click.option("--debug", is_flag=True, envvar="EDGEKIT_DEBUG",
              help="print the traceback of an error (env: EDGEKIT_DEBUG=1)")
def cli(debug: bool) -> None:
    """Take a PyTorch model to edge devices and prove it runs there, correctly and fast."""


def examples(*lines: str) -> str:
    """A command's "Examples:" section (its --help epilog): one command a line, kept as
    written (click's \\b), each short enough for 80 columns."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


TRUST_PICKLE = click.option("--trust-pickle", is_flag=True,
                            help="load a .pt2 model although torch.export.load unpickles it "
                                 "(it can run code): only for files you made or trust")
IDENTITY = click.option("--identity", type=click.Path(path_type=Path),
                        help="private key [default: the registered device's, else ~/.ssh/id_*]")
HOST_HELP = "device: a registered name (e.g. lab-aarch64-1) or user@host[:port]"
WIDE = click.option("--wide", is_flag=True, expose_value=False, is_eager=True,
                    callback=lambda ctx, param, value: render.set_wide(value),
                    help="tables at their natural width, nothing wrapped or abbreviated")
ALLOW_UNSIGNED = click.option(
    "--allow-unsigned", is_flag=True,
    help="deploy even if the bundle is unsigned or its signer is not in allowed_signers "
         "(recorded in the device's journal)")


@cli.command(epilog=examples(
    "edgekit build --recipe recipes/kws_mlp.yaml --target rpi4",
    "edgekit build --recipe recipes/kws_mlp.yaml --target host --tar",
    "edgekit build --recipe r.yaml --target rpi4 --compare-quantization"))
@click.option("--recipe", "recipe", required=True, type=click.Path(path_type=Path),
              help="recipe YAML", shell_complete=complete.recipes)
@click.option("--target", "target", required=True, help="target profile name or YAML path",
              shell_complete=complete.targets)
@click.option("--out", type=click.Path(path_type=Path), help="bundle directory "
              "[default: build/<app>-<target>]")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has this build")
@click.option("--tar", is_flag=True, help="also write the bundle as <out>.tar")
@click.option("--no-tuned", is_flag=True, help="ignore `edgekit tune`'s choice: the profile's "
              "default lowering and flags")
@click.option("--compare-quantization", is_flag=True, help="build fp32, int8 (with the "
              "recipe's calibration), int8-weights and fp16; report size, accuracy, latency")
@click.option("--host", help="with --compare-quantization: validate and time the variants on "
              "this device (never activated, removed afterwards)",
              shell_complete=complete.devices)
@IDENTITY
@TRUST_PICKLE
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@WIDE
@handle_errors
def build(recipe: Path, target: str, out: Path | None, no_cache: bool, tar: bool,
          no_tuned: bool, compare_quantization: bool, host: str | None, identity: Path | None,
          trust_pickle: bool, as_json: bool) -> None:
    """Build a deployable bundle for a target from a recipe."""
    from edgekit.errors import ConfigError
    from edgekit.api.build import BuildOptions, build as run_build
    options = BuildOptions(recipe=recipe, target=target, out=out, use_cache=not no_cache, tar=tar,
                           use_tuned=not no_tuned, trust_pickle=trust_pickle)
    if host and not compare_quantization:
        raise ConfigError("--host goes with --compare-quantization (to deploy, use "
                          "`edgekit deploy`)", key="host")
    if compare_quantization:
        from edgekit.api.compare_quantization import compare_quantization as compare
        if host:
            _changing(f"a comparison that tries variants on {host}",
                      hint="tried releases are never activated and are removed as the trial "
                           "stops: `edgekit releases HOST --app APP` lists what is there")
        with render.steps("building…") as status:
            results = compare(options, say=status.update, host=host, identity=identity)
        if as_json:
            render.emit_json(render.quantization_comparison_json(results))
        else:
            render.quantization_comparison(results)
        return
    if as_json:
        render.emit_json(render.build_json(run_build(options)))
        return
    with render.steps("building…") as status:
        result = run_build(options, on_stage=lambda name: status.update(f"{name}…"))
    render.build_summary(result)


@cli.command()
@click.option("--recipe", type=click.Path(path_type=Path),
              help="recipe YAML [default: the MobileNetV2-like example]",
              shell_complete=complete.recipes)
@click.option("--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64",
              show_default=True, help="the lab device to start (aarch64: a Pi under qemu)")
@click.option("--target", help="target profile [default: host for x86_64, rpi4 for aarch64]",
              shell_complete=complete.targets)
@handle_errors
def demo(recipe: Path | None, arch: str, target: str | None) -> None:
    """Start a lab device, deploy an example to it, validate on it, report, stop it."""
    from edgekit.api.demo import DEFAULT_RECIPE, run_demo
    try:
        with render.steps("starting…") as status:
            result = run_demo(recipe or DEFAULT_RECIPE, arch, target, on_stage=status.update)
    except ValidationFailed as exc:
        render.validation_table(exc.report)
        raise
    render.deploy_summary(result.deploy)
    render.out.print(f"stopped {result.device}")


@cli.command(epilog=examples(
    "edgekit validate build/kws-mlp-host",
    "edgekit validate build/kws-mlp-host.tar --json"))
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--local", is_flag=True,
              help="run on this machine: the only mode, accepted for old scripts (device "
                   "validation comes with `edgekit deploy`)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@WIDE
@handle_errors
def validate(bundle: Path, local: bool, as_json: bool) -> None:
    """Run a bundle's golden inputs and compare with its golden outputs."""
    from edgekit.validate.local import validate_local
    report = validate_local(bundle)
    if as_json:
        render.emit_json(report.model_dump(mode="json"))
    else:
        render.validation_table(report)
    if not report.ok:
        raise ValidationFailed("outputs differ from the golden reference beyond the bundle's "
                               "tolerances", report=report)


@cli.group()
def targets() -> None:
    """List and inspect target profiles."""


@targets.command("list")
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def targets_list(as_json: bool) -> None:
    """Every profile found (EDGEKIT_TARGETS_PATH, ./targets, built-in)."""
    from edgekit.config.profiles import available_targets, load_target
    rows = [load_target(str(path)) for path in available_targets().values()]
    if as_json:
        render.emit_json([t.model_dump(mode="json") for t in rows])
        return
    # names, arches and backends stay whole (they are typed back); the description folds
    table = render.fitted_table("", [("name", "key"), ("arch", "key"), ("backend", "key"),
                                     ("cpu / gpu", "short"), ("description", "text")])
    if not render.wide:
        table.columns[-2].max_width = 14      # one long Vulkan profile name folds
    for t in rows:
        device = t.cpu.cpu if t.cpu else (t.vulkan.target if t.vulkan else "")
        if t.npu:
            device = f"{device} + {t.npu.accelerator}" if device else t.npu.accelerator
        table.add_row(t.name, t.arch, t.backend, device, t.description)
    render.out.print(table)


@targets.command("show", epilog=examples(
    "edgekit targets show rpi4",
    "edgekit targets show targets/my-board.yaml --json"))
@click.argument("name", shell_complete=complete.targets)
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def targets_show(name: str, as_json: bool) -> None:
    """A profile after `extends:`, with the iree-compile flags it implies."""
    from edgekit.config.profiles import load_target
    from edgekit.toolchain.iree import target_flags
    target = load_target(name)
    data = {**target.model_dump(mode="json"), "iree_compile_flags": list(target_flags(target))}
    if as_json:
        render.emit_json(data)
        return
    import yaml
    render.out.print(yaml.safe_dump(data, sort_keys=False), highlight=False, markup=False)


def _connecting(host: str):
    """The "connecting to HOST…" step, after the name is known to be a device: an unknown
    name's error is the only line, not a progress line that pretends to connect."""
    from edgekit.config.devices import lookup_device
    from edgekit.config.address import local_root
    if local_root(host) is None:
        lookup_device(host)
    return render.steps(f"connecting to {escape(host)}…")


@cli.command()
@click.argument("kind", type=click.Choice(["recipe", "fleet"]))
@handle_errors
def schema(kind: str) -> None:
    """Print the JSON Schema of a config file kind (for editor autocompletion)."""
    from edgekit.config.fleet import fleet_json_schema
    from edgekit.config.recipe import recipe_json_schema
    schema = recipe_json_schema() if kind == "recipe" else fleet_json_schema()
    sys.stdout.write(json.dumps(schema, indent=2) + "\n")


@cli.command()
@click.argument("model")
@click.option("--target", default="host", show_default=True, help="target profile",
              shell_complete=complete.targets)
@TRUST_PICKLE
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def check(model: str, target: str, trust_pickle: bool, as_json: bool) -> None:
    """Which operators of MODEL (.onnx, .pt2, recipe .yaml or module:factory) make it through
    import, TOSA, Linalg and the target's compiler. Exit 0 when the model can be built."""
    from edgekit.pipeline.check import run_check
    with render.err.status("checking operators…") as status:
        def progress(line: str) -> None:  # one line per step, on stderr (stdout may be JSON)
            render.err.print(f"check: {line}", highlight=False, markup=False)
            status.update(f"checking operators… {line}")
        report = run_check(model, target, trust_pickle=trust_pickle, on_progress=progress)
    if as_json:
        from dataclasses import asdict
        render.emit_json({**asdict(report), "buildable": report.buildable})
    elif hasattr(report, "accelerator"):       # an NPU target's placement table
        render.npu_check_table(report)
    else:
        render.check_table(report)
    if not report.buildable and hasattr(report, "accelerator"):
        bad = sorted({r.op for r in report.ops if r.placement == "unsupported"})
        raise NotBuildable(f"{', '.join(bad)}: neither the NPU nor the CPU fallback of "
                           f"{target} runs {'it' if len(bad) == 1 else 'them'}",
                           hint="replace the op, or pick a target with a CPU (see the reasons)")
    if not report.buildable:
        raise NotBuildable(f"no lowering builds {model} for {target}",
                           hint="see each operator's first failure and its reproducer")



@cli.command(epilog=examples(
    "edgekit deploy build/kws-mlp-rpi4 --host lab-aarch64-1",
    "edgekit deploy --recipe recipes/kws_mlp.yaml --target rpi4 --host HOST",
    "edgekit deploy build/kws-mlp-host.tar --host lab-x86_64-1 --json",
    "edgekit deploy --recipe r.yaml --target rpi4 --host HOST --dry-run"))
@click.argument("bundle", required=False, type=click.Path(path_type=Path))
@click.option("--target", help="target profile name or YAML path (with --recipe)",
              shell_complete=complete.targets)
@click.option("--recipe", type=click.Path(path_type=Path), help="recipe YAML, built first",
              shell_complete=complete.recipes)
@click.option("--host", required=True, help=HOST_HELP, shell_complete=complete.devices)
@IDENTITY
@click.option("--keep", default=3, show_default=True, help="releases kept on the device")
@click.option("--no-cache", is_flag=True, help="rebuild even when the cache has this build")
@ALLOW_UNSIGNED
@TRUST_PICKLE
@click.option("--cpu-fallback", is_flag=True,
              help="an NPU bundle: deploy its IREE CPU module on a device without the NPU")
@click.option("--allow-downgrade", is_flag=True,
              help="deploy a build older than the newest release activated on the device "
                   "(recorded in the device's journal)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@WIDE
@handle_errors
def deploy(bundle: Path | None, target: str | None, recipe: Path | None, host: str,
           identity: Path | None, keep: int, no_cache: bool, allow_unsigned: bool,
           trust_pickle: bool, cpu_fallback: bool, allow_downgrade: bool,
           as_json: bool, dry_run: bool) -> None:
    """Ship BUNDLE (a directory or .tar from `edgekit build`), or build --recipe for --target
    first; check the device, upload, validate on the device, then activate."""
    from edgekit.api.deploy import DeployOptions, deploy as run_deploy
    options = DeployOptions(host=host, bundle=bundle, recipe=recipe, target=target,
                            identity=identity, keep=keep, use_cache=not no_cache,
                            allow_unsigned=allow_unsigned, trust_pickle=trust_pickle,
                            cpu_fallback=cpu_fallback, allow_downgrade=allow_downgrade)
    if dry_run:   # --dry-run (cli/dry_run.py): the plan, read from the device
        from edgekit.api.dry_run import deploy_dry_run
        return _show_dry_run(deploy_dry_run(options), dry_runs.deploy_plan, as_json)
    def stage(name: str, show=None) -> None:
        if name not in DEPLOY_STAGES_THAT_READ:
            _changing(f"the deploy's {name} step on {host}")
        if show:
            show(f"{name}…")
    try:
        if as_json:
            result = run_deploy(options, on_stage=stage)
        else:
            with render.steps("deploying…") as status:
                result = run_deploy(options, on_stage=lambda n: stage(n, status.update))
    except ValidationFailed as exc:
        # where it goes wrong: bisect rebuilds from the recipe, or from the bundle's manifest
        # (its model source must be on this machine; bisect says so otherwise)
        offer = shlex.join(["edgekit", "bisect", "--recipe", str(recipe), "--target", target,
                            "--host", host]) if recipe and target else \
            shlex.join(["edgekit", "bisect", "--bundle", str(bundle), "--host", host]) \
            if bundle else None
        if as_json:
            render.emit_json({"ok": False, "error": exc.what,
                              "report": exc.report.model_dump(mode="json"), "bisect": offer})
        else:
            render.validation_table(exc.report)
            if offer:
                render.err.print(f"to find the first layer that goes wrong: {offer}",
                                 highlight=False, markup=False)
        raise
    if as_json:
        render.emit_json(render.deploy_json(result))
    else:
        render.deploy_summary(result)


def _show_dry_run(result, show, as_json: bool) -> None:
    if as_json:
        render.emit_json(dry_runs.as_json(result))
    else:
        show(result)


# deploy's stages (api.deploy, device.deploy) that change nothing on the device
DEPLOY_STAGES_THAT_READ = frozenset({"build", "connect and preflight", "preflight"})


@cli.command(epilog=examples(
    "edgekit probe lab-aarch64-1",
    "edgekit probe pi@192.0.2.10:2222 --identity ~/.ssh/id_ed25519 --json"))
@click.argument("host", shell_complete=complete.devices)
@IDENTITY
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def probe(host: str, identity: Path | None, as_json: bool) -> None:
    """What a device is: arch, CPU, memory, disk, OS, Vulkan, NPUs, runtimes."""
    from edgekit.device.probe import probe as run_probe
    from edgekit.transport import open_device
    with _connecting(host), open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
    if as_json:
        render.emit_json({"device": str(address), **info.model_dump(mode="json")})
    else:
        render.probe_table(render.named(str(address)), info)


@cli.command()
@click.argument("host", shell_complete=complete.devices)
@click.option("--target", help="(informational) the profile you will deploy",
              shell_complete=complete.targets)
@IDENTITY
@handle_errors
def provision(host: str, target: str | None, identity: Path | None) -> None:
    """Install the IREE runtime tools (the compiler's version) and the shims on a device."""
    from edgekit.device.probe import probe as run_probe
    from edgekit.device.provision import provision as run_provision
    from edgekit.transport import open_device
    if target:
        from edgekit.config.profiles import load_target
        load_target(target)
    with _connecting(host), open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
        _changing(f"provisioning {host}", hint=f"`edgekit provision {host}` again installs "
                  "what is missing and checks it by running it")
        result = run_provision(conn, info)
    state = (f"installed {len(result.uploaded)} file(s), {result.uploaded_bytes:,} bytes"
             if result.uploaded else "already up to date")
    render.out.print(f"{address}: runtime {result.runtime_dir}, shims {result.shims_dir}: "
                     f"{state}; verified by running them")


@cli.command()
@click.argument("host", shell_complete=complete.devices)
@click.option("--app", required=True, help="app name (the recipe's name)")
@IDENTITY
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def releases(host: str, app: str, identity: Path | None, as_json: bool) -> None:
    """Releases of an app on a device, newest first; * marks current."""
    from edgekit.device.releases import describe_releases
    from edgekit.config.address import safe_name
    from edgekit.transport import open_device
    safe_name(app, "app")
    with _connecting(host), open_device(host, identity) as conn:
        infos = describe_releases(conn, app)
    if as_json:
        render.emit_json([vars(i) for i in infos])
        return
    from edgekit.config.devices import device_label
    render.releases_table(device_label(host), app, infos)


@cli.command(epilog=examples(
    "edgekit rollback pi@192.0.2.10 --app kws-mlp",
    "edgekit rollback lab-aarch64-1 --app kws-mlp --to RELEASE  # see `releases`",
    "edgekit rollback lab-aarch64-1 --app kws-mlp --dry-run"))
@click.argument("host", shell_complete=complete.devices)
@click.option("--app", required=True, help="app name (the recipe's name)")
@click.option("--to", "to", help="release id [default: the one activated before current]")
@IDENTITY
@click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@handle_errors
def rollback(host: str, app: str, to: str | None, identity: Path | None, dry_run: bool = False,
             as_json: bool = False) -> None:
    """Make the previously activated release current again (atomic switch)."""
    if dry_run:   # --dry-run (cli/dry_run.py): the plan, read from the device
        from edgekit.api.dry_run import rollback_dry_run
        return _show_dry_run(rollback_dry_run(host, app, to, identity), dry_runs.rollback_plan,
                             as_json)
    from edgekit.device.probe import probe as run_probe
    from edgekit.device.provision import needs_provisioning, provision as run_provision, \
        shim_version
    from edgekit.device.layout import shims_dir
    from edgekit.device.releases import rollback as run_rollback
    from edgekit.config.address import safe_name
    from edgekit.transport import open_device
    safe_name(app, "app")
    if to:
        safe_name(to, "release")
    with _connecting(host), open_device(host, identity) as conn:
        address = conn.where
        info = run_probe(conn)
        _changing(f"the rollback of {app} on {host}")
        if needs_provisioning(info):
            run_provision(conn, info)
        before, after = run_rollback(conn, app, shims_dir(shim_version()), to)
    if as_json:
        render.emit_json({"device": str(address), "app": app, "from": before or None,
                          "to": after})
        return
    render.out.print(f"{address}: {app} rolled back from {before or '(none)'} to {after}")


@cli.group()
def devices() -> None:
    """Known devices and their pinned host keys."""


@devices.command("trust")
@click.argument("host", shell_complete=complete.devices)
@click.option("--fingerprint", help="pin only if the device's key has this SHA256 fingerprint")
@click.option("--replace", is_flag=True, help="replace a pinned key (device re-imaged)")
@click.option("--yes", is_flag=True, help="do not ask")
@handle_errors
def devices_trust(host: str, fingerprint: str | None, replace: bool, yes: bool) -> None:
    """Show a device's host key fingerprint and pin it."""
    from edgekit.config.devices import lookup_device
    from edgekit.errors import ConfigError, HostKeyChanged
    from edgekit.transport.ssh import fetch_host_key, pin_host_key, pinned_fingerprint
    address, _ = lookup_device(host)
    key_type, key_b64, seen = fetch_host_key(address)
    pinned = pinned_fingerprint(address)
    render.out.print(f"{address} presents {key_type} {seen}")
    if pinned == seen:
        render.out.print("already pinned")
        return
    if pinned and not replace:
        raise HostKeyChanged("a different key is pinned for this device", where=str(address),
                             got=seen, expected=pinned,
                             hint="pass --replace if the device was re-imaged on purpose")
    if fingerprint and fingerprint != seen:
        raise ConfigError(f"the device's key is {seen}, not {fingerprint}", key="fingerprint")
    if not (fingerprint or yes or click.confirm("pin this key?", default=False)):
        raise ConfigError("not pinned", hint="compare the fingerprint with the device's "
                          "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`")
    pin_host_key(address, key_type, key_b64, replace=replace)
    render.out.print("pinned")


@devices.command("untrust-signer")
@click.argument("host")
@click.argument("signer")
@click.option("--identity", type=click.Path(path_type=Path), help="private key [default: the "
              "registered device's, else ~/.ssh/id_*]")
@handle_errors
def devices_untrust_signer(host: str, signer: str, identity: Path | None) -> None:
    """Remove SIGNER (a principal, or a key's SHA256:… fingerprint) from HOST's allowed
    signers. Deploys only ever add to that set (a device may have several controllers):
    this is how a key leaves it. Releases it signed no longer verify there."""
    from edgekit.device.trust import untrust_signer
    from edgekit.errors import ConfigError
    from edgekit.transport import open_device
    with _connecting(host), open_device(host, identity) as conn:
        address = conn.where
        removed = untrust_signer(conn, signer)
    if not removed:
        raise ConfigError(f"no signer {signer!r} on {address}", key="signer",
                          hint="name a principal (the first word of an allowed_signers line) "
                               "or a key fingerprint SHA256:…")
    for line in removed:
        render.out.print(f"{render.untrusted(address)}: removed {render.untrusted(line)}",
                         highlight=False)


@devices.command("list")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def devices_list(as_json: bool) -> None:
    """Registered devices (lab devices register themselves)."""
    from edgekit.config.devices import load_registry
    entries = [e.model_dump() for e in load_registry().values()]
    if as_json:
        render.emit_json(entries)
        return
    for e in entries:
        render.out.print(f"{e['name']:<18} {e['address']:<28} {e['arch']:<8} {e['identity']}")


@cli.group()
def lab() -> None:
    """Emulated devices: real sshd on 127.0.0.x (x86_64 with llvmpipe; aarch64 under qemu)."""


@lab.command("up", epilog=examples(
    "edgekit lab up                            # lab-x86_64-1",
    "edgekit lab up --arch aarch64 --count 2   # two Raspberry Pi 4 stand-ins",
    "edgekit lab up --name bench-box --json"))
@click.option("--arch", type=click.Choice(["x86_64", "aarch64"]), default="x86_64",
              show_default=True)
@click.option("--count", type=click.IntRange(1, 32),
              help="how many devices (default 1, or one per --name)")
@click.option("--name", "names", multiple=True,
              help="the device's name (repeat for several); default lab-ARCH-N, numbered "
                   "from 1 in this lab")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def lab_up(arch: str, count: int | None, names: tuple[str, ...], as_json: bool) -> None:
    """Start lab devices as you (no root), pin their host keys and register them by name."""
    from edgekit.errors import ConfigError
    from edgekit.lab import devices as lab_devices
    if names and count is not None and count != len(names):
        raise ConfigError(f"--count {count} but {len(names)} --name given", key="--count",
                          hint="give one --name per device, or --count alone")
    with render.err.status("starting the lab…") as status:
        started = lab_devices.up(arch, count or len(names) or 1, on_progress=status.update,
                                 names=list(names) or None)
    if as_json:
        render.emit_json([{**d.model_dump(), "address": d.address} for d in started])
        return
    # one device per line (a user@127.0.0.x:port address is ~35 characters), the hint once:
    # the lines stay within 80 columns
    for d in started:
        render.out.print(f"{d.name}: {d.address} ({d.arch})", soft_wrap=True, highlight=False)
    if started:
        render.out.print(f"e.g. edgekit probe {started[0].name}", highlight=False)


@lab.command("status")
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def lab_status(as_json: bool) -> None:
    """Lab devices and whether they run."""
    from edgekit.lab import devices as lab_devices
    rows = lab_devices.status()
    if as_json:
        render.emit_json(rows)
        return
    if not rows:
        render.out.print("no lab devices (start some with `edgekit lab up`)")
    for r in rows:
        state = "[green]running[/]" if r["running"] else "[red]stopped[/]"
        render.out.print(f"{r['name']:<16} {r['address']:<28} {r['arch']:<8} {state}")


@lab.command("down")
@handle_errors
def lab_down() -> None:
    """Stop every lab device and remove its files and registration."""
    from edgekit.lab import devices as lab_devices
    stopped = lab_devices.down(on_progress=render.err.print)
    render.out.print(f"stopped {len(stopped)} lab device(s)")


class DefaultCommandGroup(click.Group):
    """`edgekit bench HOST …` runs the default subcommand; `edgekit bench compare` others."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@cli.group(cls=DefaultCommandGroup, epilog=examples(
    "edgekit bench lab-aarch64-1 --app kws-mlp --threads 1,2",
    "edgekit bench --lab --bundle build/kws-mlp-host --html report.html",
    "edgekit bench compare      # newest vs previous release; exit 9 if slower",
    "edgekit bench report --html report.html"))
def bench() -> None:
    """Benchmark deployed models on devices; compare and report (`bench HOST … --app A`)."""


@bench.command("run")
@click.argument("hosts", nargs=-1, shell_complete=complete.devices)
@click.option("--lab", "all_lab", is_flag=True, help="every running lab device")
@click.option("--app", help="bench the app's current release")
@click.option("--bundle", type=click.Path(path_type=Path), help="deploy this bundle, bench it")
@click.option("--threads", help="comma-separated, e.g. 1,2,4 [default: the bundle's tuned "
              "configuration (driver and thread count), 1 when untuned]")
@click.option("--repetitions", default=50, show_default=True, help="measured calls")
@click.option("--warmup", default=5, show_default=True, help="calls dropped in each round")
@click.option("--rounds", default=5, show_default=True,
              help="separate benchmark processes, interleaved across configurations")
@IDENTITY
@ALLOW_UNSIGNED
@click.option("--html", type=click.Path(path_type=Path), help="write an HTML report here")
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def bench_run(hosts: tuple[str, ...], all_lab: bool, app: str | None, bundle: Path | None,
              threads: str | None, repetitions: int, warmup: int, rounds: int,
              identity: Path | None, allow_unsigned: bool, html: Path | None,
              as_json: bool) -> None:
    """Run iree-benchmark-module on one or more devices; results go to the history."""
    from edgekit.device.bench import BenchOptions, run_bench
    from edgekit.errors import ConfigError
    if all_lab:
        from edgekit.lab.devices import status
        hosts = hosts + tuple(d["name"] for d in status() if d["running"])
    if not hosts:
        raise ConfigError("name at least one device (or --lab)", key="hosts")
    try:
        thread_counts = tuple(int(t) for t in threads.split(",")) if threads else None
    except ValueError:
        raise ConfigError(f"--threads must be numbers separated by commas (got {threads!r})",
                          key="threads") from None
    options = BenchOptions(hosts=hosts, app=app, bundle=bundle, threads=thread_counts,
                           repetitions=repetitions, warmup=warmup, rounds=rounds,
                           identity=identity, allow_unsigned=allow_unsigned)
    if as_json:
        results = run_bench(options)
    else:
        results = render.with_progress(lambda progress: run_bench(options, progress))
    comparisons = _comparisons_for(results)
    if html:
        _write_html(html, results, comparisons)
    if as_json:
        render.emit_json({"results": [r.model_dump(mode="json") for r in results],
                          "comparisons": [c.model_dump(mode="json") for c in comparisons]})
        return
    render.bench_table(results)
    render.comparison_table(comparisons)
    if html:
        render.out.print(f"report: {html}")


def _comparisons_for(results):
    from edgekit.device.history import compare, load_history, previous_release_result
    history = load_history()
    found = []
    for r in results:
        base = previous_release_result(r, history)
        if base is not None:
            found.append(compare(base, r))
    return found


def _write_html(path: Path, results, comparisons) -> None:
    import datetime

    from edgekit.device.history import load_history
    from edgekit.report.bench_html import render_report
    apps = {(r.device, r.app) for r in results}
    history = [h for h in load_history() if (h.device, h.app) in apps]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    path.write_text(render_report(results, comparisons, history, now))


@bench.command("compare")
@click.argument("ids", nargs=-1)
@click.option("--force", is_flag=True, help="compare two results although they measure "
              "different devices, apps, targets, thread counts or drivers")
@WIDE
@click.option("--json", "as_json", is_flag=True)
@handle_errors
def bench_compare(ids: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Two result ids (base, new), or none: each series' newest result against its previous
    release. A regression is flagged only beyond the measured noise (exit 9). Nothing to
    compare is said on stderr and exits 0: a first release has no baseline, which is no
    failure of a pipeline that gates on regressions."""
    from edgekit.device.history import compare, compare_latest, differences, get
    from edgekit.errors import ConfigError
    if len(ids) == 2:
        base, new = get(ids[0]), get(ids[1])
        differ = differences(base, new)
        if differ and not force:
            raise ConfigError(f"results {base.id} and {new.id} measure different things "
                              f"({'; '.join(differ)})", key="ids",
                              hint="compare results of one device, app, target and thread "
                                   "count, or pass --force")
        comparisons = [compare(base, new)]
        title = (f"{base.id} vs {new.id}" + (f" (forced: {'; '.join(differ)})" if differ
                                               else ""))
    elif not ids:
        notes: list[str] = []
        comparisons = compare_latest(notes)
        _say_skipped(notes)
        title = "newest result of each series against its previous release"
    else:
        raise ConfigError("give two result ids (base new) or none", key="ids")
    if as_json:
        render.emit_json([c.model_dump(mode="json") for c in comparisons])
    elif not comparisons:
        render.err.print("nothing to compare: no device, app and thread count has results of "
                         "two releases (`edgekit bench history` lists the results)",
                         highlight=False)
    else:
        render.comparison_table(comparisons, title=title)
    regressions = [c for c in comparisons if c.regression]
    if regressions:
        raise BenchRegression(f"{len(regressions)} of {len(comparisons)} comparison(s) slower "
                              "beyond the measured noise",
                              where=", ".join(sorted({f"{c.device} {c.app}" for c in regressions})))


@bench.command("history")
@click.option("--app", help="only this app")
@click.option("--json", "as_json", is_flag=True)
@WIDE
@handle_errors
def bench_history(app: str | None, as_json: bool) -> None:
    """Stored results, oldest first."""
    from edgekit.device.history import load_history
    notes: list[str] = []
    results = [r for r in load_history(notes) if app is None or r.app == app]
    _say_skipped(notes)
    if as_json:
        render.emit_json([r.model_dump(mode="json") for r in results])
    else:
        render.bench_table(results, with_ids=True)


def _say_skipped(notes: list[str]) -> None:
    """Stored results that could not be used, one line each on stderr (the view goes on)."""
    for note in notes:
        render.err.print(f"edgekit: {render.untrusted(note)}", highlight=False)


@bench.command("report")
@click.option("--app", help="only this app")
@click.option("--html", type=click.Path(path_type=Path), required=True)
@handle_errors
def bench_report(app: str | None, html: Path) -> None:
    """HTML report of the stored history (distribution, thread scaling, releases)."""
    from edgekit.device.history import compare_latest, load_history
    notes: list[str] = []
    results = [r for r in load_history(notes) if app is None or r.app == app]
    _say_skipped(notes)
    comparisons = [c for c in compare_latest() if app is None or c.app == app]
    _write_html(html, results, comparisons)
    render.out.print(f"report: {html} ({len(results)} results)")


@cli.command()
@click.argument("shell", type=click.Choice(complete.SHELLS))
@handle_errors
def completion(shell: str) -> None:
    """Print the shell completion script: commands, options, target names, registered devices
    and recipe paths complete on TAB.

    \b
    bash: echo 'eval "$(edgekit completion bash)"' >> ~/.bashrc
    zsh:  echo 'eval "$(edgekit completion zsh)"' >> ~/.zshrc
    fish: edgekit completion fish > ~/.config/fish/completions/edgekit.fish
    """
    sys.stdout.write(complete.script(cli, shell))


# command groups in their own modules register themselves on `cli`
from edgekit.cli import fleet as _fleet_commands  # noqa: E402,F401
from edgekit.cli import tune as _tune_command  # noqa: E402,F401
from edgekit.cli import bisect as _bisect_command  # noqa: E402,F401
from edgekit.cli import derive as _derive_command  # noqa: E402,F401
from edgekit.cli import toolchains as _toolchains_commands  # noqa: E402,F401
from edgekit.cli import bundle as _bundle_commands  # noqa: E402,F401


def main() -> None:
    cli(prog_name="edgekit")


if __name__ == "__main__":
    # through the imported module: `edgekit fleet` (edgekit.cli.fleet) registers itself on
    # edgekit.cli.main's group, not on this __main__ copy's
    from edgekit.cli.main import main as imported_main
    imported_main()
