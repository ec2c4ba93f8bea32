"""The one error root of edgekit.

Every failure a user can cause or meet is an :class:`EdgekitError` carrying *what* failed,
*where* (file:line, stage, op, device) and a *hint*. Each class carries its exit code, and this
module is the only place exit codes are written: the CLI exits with the code of the error it
caught (any other exception exits with :class:`EdgekitError`'s 1), and the docs' exit-code table
is generated from :data:`EXIT_CODES` and each class's docstring (docs/gen_reference.py): the
first paragraph of a docstring here is what users read. This module imports nothing from
edgekit.
"""

from __future__ import annotations


class EdgekitError(Exception):
    """Base class: a failure with a message a user can act on."""

    exit_code = 1
    # errors about the user's own files: their text (a key, a name) is shown escaped, so a
    # newline or a terminal escape in it cannot break the one-line message or the terminal
    escapes_input = False

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.hint = hint

    def _shown(self, text: str) -> str:
        return printable(text) if self.escapes_input else text

    def _what(self) -> str:
        return self.what

    def __str__(self) -> str:
        head = self.headline()
        return f"{head}\n  hint: {self._shown(self.hint)}" if self.hint else head

    def headline(self) -> str:
        """The first line: where, what (no hint)."""
        what = self._shown(self._what())
        return f"{self._shown(self.where)}: {what}" if self.where else what

    def as_json(self) -> dict:
        """The error as `--json` prints it: {"error", "exit", "hint", "kind"}."""
        return {"error": self.headline(), "exit": self.exit_code,
                "hint": self._shown(self.hint) if self.hint else None,
                "kind": type(self).__name__}


def printable(text: str) -> str:
    """`text` with its non-printable characters escaped as Python writes them (`\\n`,
    `\\x1b`); printable ones, accented letters included, unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigError(EdgekitError):
    """A recipe, target profile or option is wrong — also an unknown device name, no private
    key to log in with, a recipe's inputs the model fails on, `bench compare` of unlike
    results. `where` is file:line and `key` the key."""

    exit_code = 2
    escapes_input = True

    def __init__(self, what: str, *, where: str | None = None, key: str | None = None,
                 hint: str | None = None):
        super().__init__(what, where=where, hint=hint)
        self.key = key

    def _what(self) -> str:
        return f"{self.key}: {self.what}" if self.key else self.what


class ModelLoadError(EdgekitError):
    """The model source could not be loaded or exported."""

    exit_code = 3


class LoweringError(EdgekitError):
    """No lowering path produced a module. Names the ops, the stage and a reproducer path."""

    exit_code = 4

    def __init__(self, what: str, *, stage: str, ops: tuple[str, ...] = (),
                 reproducer: str | None = None, hint: str | None = None):
        super().__init__(what, where=f"stage {stage}", hint=hint)
        self.stage = stage
        self.ops = ops
        self.reproducer = reproducer


class NotBuildable(EdgekitError):
    """`edgekit check` found operators that no lowering path gets through for the target: the
    build would fail with a :class:`LoweringError`, hence its exit code."""

    exit_code = 4


class QuantizationError(EdgekitError):
    """A quantized build that does not deliver what it claims: accuracy below the recipe's
    floor, or an int8 module whose contractions compute in floating point."""

    exit_code = 18


class ToolError(EdgekitError):
    """An external tool (iree-run-module, …) failed: argv, exit code and stderr tail."""

    exit_code = 5

    def __init__(self, what: str, *, argv: list[str], returncode: int, stderr_tail: str,
                 hint: str | None = None):
        super().__init__(what, hint=hint)
        self.argv = argv
        self.returncode = returncode
        self.stderr_tail = stderr_tail

    def __str__(self) -> str:
        return _command_failure(self.what, self.argv, self.returncode, self.stderr_tail,
                                self.hint)


def _command_failure(head: str, argv: list[str], returncode: int, stderr_tail: str,
                     hint: str | None) -> str:
    tail = "\n    ".join(stderr_tail.strip().splitlines()[-12:])
    text = f"{head} (exit {returncode})\n  command: {' '.join(argv)}"
    if tail:
        text += f"\n  stderr:\n    {tail}"
    return f"{text}\n  hint: {hint}" if hint else text


class ToolchainMissing(EdgekitError):
    """An optional toolchain (an NPU compiler in its own venv) is not installed: the hint names
    `edgekit toolchains install …`. Same code as a failing tool."""

    exit_code = 5


class BundleError(EdgekitError):
    """A bundle is missing, malformed, or its files do not match their recorded sha256."""

    exit_code = 6
    escapes_input = True


class BundleNotTrusted(BundleError):
    """The bundle's manifest is unsigned, signed by a key not in allowed_signers, or changed
    after it was signed: refused before anything is uploaded (same exit code as BundleError)."""

    exit_code = 6


class CannotRunHere(EdgekitError):
    """The bundle's target cannot execute on this machine (wrong arch, no Vulkan device)."""

    exit_code = 7


class ValidationFailed(EdgekitError):
    """Outputs differ from the golden reference beyond the bundle's tolerances."""

    exit_code = 8

    def __init__(self, what: str, *, report, hint: str | None = None):
        super().__init__(what, hint=hint)
        self.report = report


class UninformativeGolden(ValidationFailed):
    """A golden output that cannot tell a right module from a wrong one (constant, all zero,
    all NaN/Inf, the same for every sample): refused at build time unless the recipe accepts
    it (`validation.accept_uninformative`)."""

    def __init__(self, what: str, *, output: str, where: str | None = None,
                 hint: str | None = None):
        super().__init__(what, report=None, hint=hint)
        self.where = where
        self.output = output


class BenchRegression(EdgekitError):
    """`edgekit bench compare` found a result slower than its baseline beyond the measured
    noise."""

    exit_code = 9


class DeviceError(EdgekitError):
    """Something about a device; `where` names it (user@host:port)."""

    exit_code = 10


class DeviceUnreachable(DeviceError):
    """No SSH connection could be made (refused, timed out, no route) after bounded retries."""

    exit_code = 10


class AuthFailed(DeviceError):
    """The device refused our key."""

    exit_code = 11


class HostKeyUnknown(DeviceError):
    """The device's host key is not pinned: nothing was sent to it."""

    exit_code = 12


class HostKeyChanged(DeviceError):
    """The device presented a different host key than the pinned one: refused before auth."""

    exit_code = 13

    def __init__(self, what: str, *, where: str, got: str, expected: str,
                 hint: str | None = None):
        super().__init__(what, where=where, hint=hint)
        self.got = got
        self.expected = expected


class DeviceIncompatible(DeviceError):
    """Preflight found that the device cannot execute the bundle; nothing was uploaded."""

    exit_code = 14


class RemoteCommandFailed(DeviceError):
    """A command on the device failed: its argv, exit code and stderr tail."""

    exit_code = 15

    def __init__(self, what: str, *, where: str, argv: list[str], returncode: int,
                 stderr_tail: str, hint: str | None = None):
        super().__init__(what, where=where, hint=hint)
        self.argv = argv
        self.returncode = returncode
        self.stderr_tail = stderr_tail

    def __str__(self) -> str:
        return _command_failure(f"{self.where}: {self.what}", self.argv, self.returncode,
                                self.stderr_tail, self.hint)


class DeviceOutOfSpace(DeviceError):
    """The device has no room for the release: found at preflight (nothing was uploaded), the
    same code as a disk that fills during the upload (a command on the device that failed)."""

    exit_code = 15


class DeviceAnswerRefused(DeviceError):
    """What a device sent back is refused before edgekit uses it: a file larger than what was
    asked implies, a link or device where a regular file belongs, a number that is not finite
    or out of range. The device is not trusted; nothing it sent was kept."""

    exit_code = 15


class HealthGateFailed(DeviceError):
    """A release validated but failed a fleet health gate (latency against the release it
    replaces, or the device's own hooks); it was not left active."""

    exit_code = 16


class RolloutHalted(EdgekitError):
    """A fleet rollout stopped: a wave had more failed devices than allowed, or it was
    interrupted. The journal holds every device's result; `edgekit fleet resume` continues."""

    exit_code = 17

    def __init__(self, what: str, *, result=None, hint: str | None = None):
        super().__init__(what, hint=hint)
        self.result = result


class LabSetupError(EdgekitError):
    """A lab device could not be set up: sshd, qemu (binfmt_misc) or mmdebstrap missing."""

    exit_code = 20


class Interrupted(EdgekitError):
    """Ctrl-C (SIGINT): the shell's convention, 128 + 2. The line says whether a step that
    changes a device was in flight."""

    exit_code = 130


EXIT_CODES: dict[str, int] = {
    cls.__name__: cls.exit_code
    for cls in (EdgekitError, ConfigError, ModelLoadError, LoweringError, NotBuildable,
                QuantizationError, ToolError, ToolchainMissing,
                BundleError, CannotRunHere, ValidationFailed, UninformativeGolden,
                BenchRegression, DeviceError,
                DeviceUnreachable, AuthFailed, HostKeyUnknown, HostKeyChanged, DeviceIncompatible,
                RemoteCommandFailed, DeviceOutOfSpace, DeviceAnswerRefused, HealthGateFailed,
                RolloutHalted, LabSetupError, BundleNotTrusted, Interrupted)
}
"""Every exit code the CLI gives besides 0 (ok), by error class name."""
