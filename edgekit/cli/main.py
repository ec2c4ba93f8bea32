"""The `edgekit` command: the root group, its global options, and where each command lives.

Each command's module (edgekit/cli/<group>.py) parses its options, calls one edgekit.api
function and renders the result. The root group imports a command's module only when that
command runs (or completes), so `edgekit --help` and `edgekit X --help` stay instant and the
command modules never import this one back.
"""

from __future__ import annotations

import sys

import click
from click.utils import make_default_short_help

from edgekit.cli import render
from edgekit.cli.common import error_json, interrupted  # noqa: F401  (tests, old imports)

# name → (module:attribute, the first sentence of the command's help, which `edgekit --help`
# lists; a unit test keeps each equal to the command's own)
COMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("edgekit.cli.agent:agent",
              "Put what pulls and installs releases on a device: the channel agent or "
              "Mender's update module."),
    "bench": ("edgekit.cli.bench:bench",
              "Benchmark deployed models on devices; compare and report (`bench HOST … --app "
              "A`)."),
    "bisect": ("edgekit.cli.bisect:bisect",
               "Find the first layer whose outputs leave tolerance where a build runs wrongly: "
               "taps every module's output, then every op of the first failing module, compares "
               "each with eager PyTorch; writes that op alone as a reproducer bundle with a "
               "reproduce.sh."),
    "build": ("edgekit.cli.build:build",
              "Build a deployable bundle for a target from a recipe, or from a model file."),
    "bundle": ("edgekit.cli.bundle:bundle",
               "Look into a built bundle (a directory or .tar from `edgekit build`)."),
    "channel": ("edgekit.cli.channel:channel",
                "A release channel any web server serves; devices pull from it (`edgekit "
                "agent`)."),
    "check": ("edgekit.cli.check:check",
              "Which operators of MODEL (.onnx, .pt2, recipe .yaml or module:factory) make it "
              "through import, TOSA, Linalg and the target's compiler."),
    "completion": ("edgekit.cli.completion:completion",
                   "Print the shell completion script: commands, options, target names, registered "
                   "devices and recipe paths complete on TAB."),
    "demo": ("edgekit.cli.demo:demo",
             "Start a lab device, deploy an example to it, validate on it, report, stop it."),
    "deploy": ("edgekit.cli.deploy:deploy",
               "Ship BUNDLE (a directory or .tar from `edgekit build`), or build --recipe for "
               "--target first; check the device, upload, validate on the device, then activate."),
    "devices": ("edgekit.cli.devices:devices",
                "Known devices and their pinned host keys."),
    "export": ("edgekit.cli.mender:export",
               "Write a bundle in the format of another update engine."),
    "fleet": ("edgekit.cli.fleet:fleet",
              "Roll a model out to a fleet in waves, gated on numerics and latency."),
    "inspect": ("edgekit.cli.inspect:inspect",
                "What instructions a CPU bundle's dispatches run: each one's hot loop, counted, "
                "with llvm-mca's estimate of its cycles per iteration."),
    "lab": ("edgekit.cli.lab:lab",
            "Emulated devices: real sshd on 127.0.0.x (x86_64 with llvmpipe; aarch64 under "
            "qemu)."),
    "probe": ("edgekit.cli.devices:probe",
              "What a device is: arch, CPU, memory, disk, OS, Vulkan, NPUs, runtimes."),
    "provision": ("edgekit.cli.devices:provision",
                  "Install the IREE runtime tools (the compiler's version) and the shims on a "
                  "device."),
    "quantize": ("edgekit.cli.quantize:quantize",
                 "Mixed precision chosen by measured error: which layers of an int8 build stay "
                 "float, and what quantizing cost."),
    "releases": ("edgekit.cli.releases:releases",
                 "Releases of an app on a device, newest first; * marks current."),
    "rollback": ("edgekit.cli.releases:rollback",
                 "Make the previously activated release current again (atomic switch)."),
    "schema": ("edgekit.cli.schema:schema",
               "Print the JSON Schema of a config file kind (for editor autocompletion)."),
    "targets": ("edgekit.cli.targets:targets",
                "List and inspect target profiles."),
    "toolchains": ("edgekit.cli.toolchains:toolchains",
                   "Optional toolchains with conflicting pins (NPU compilers), in their own "
                   "venvs."),
    "tune": ("edgekit.cli.tune:tune",
             "Build, validate and benchmark lowering × flag set × threads variants; record the"
             " fastest valid one so that `build` and `deploy` use it."),
    "validate": ("edgekit.cli.validate:validate",
                 "Run a bundle's golden inputs and compare with its golden outputs."),
}


def load_command(name: str) -> click.Command:
    """Import the module of command `name` and return its click command."""
    import importlib
    module, _, attribute = COMMANDS[name][0].partition(":")
    return getattr(importlib.import_module(module), attribute)


class LazyGroup(click.Group):
    """A group whose commands are imported when one runs: listing them (`--help`) reads
    COMMANDS only. Usage errors of a command run with --json are JSON too."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            self.add_command(load_command(name), name)
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))    # as click's own listing
        rows = [(name, make_default_short_help(COMMANDS[name][1], limit) if name in COMMANDS
                 else self.commands[name].get_short_help_str(limit)) for name in names]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        argv = list(args)
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta["edgekit.argv"] = argv
        return ctx

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            argv = ctx.meta.get("edgekit.argv", [])
            if "--json" not in argv[:argv.index("--") if "--" in argv else None]:
                raise
            # a usage error (exit 2) as a JSON error, like an edgekit error under --json
            hint = f"`{exc.ctx.command_path} --help` lists the options" \
                if getattr(exc, "ctx", None) is not None else None
            kind = "UsageError" if isinstance(exc, click.UsageError) else type(exc).__name__
            render.emit_json({"error": exc.format_message(), "exit": exc.exit_code,
                              "hint": hint, "kind": kind})
            sys.exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgekit")
@click.option("--debug", is_flag=True, envvar="EDGEKIT_DEBUG",
              help="print the traceback of an error (env: EDGEKIT_DEBUG=1)")
@click.option("-q", "--quiet", is_flag=True,
              help="no progress lines (results and errors only)")
@click.option("-v", "--verbose", count=True,
              help="each step as a line with its start time, edgekit's log (-vv: debug)")
def cli(debug: bool, quiet: bool, verbose: int) -> None:
    """Take a PyTorch model to edge devices and prove it runs there, correctly and fast."""
    if quiet and verbose:
        raise click.UsageError("-q and -v contradict each other: give one")
    render.set_verbosity(-1 if quiet else verbose)


def main() -> None:
    cli(prog_name="edgekit")


if __name__ == "__main__":
    main()
