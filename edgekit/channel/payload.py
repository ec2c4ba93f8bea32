"""The device payload of a bundle: what `runtime_shims/install_bundle.sh stage-validate` takes.

A directory holding the release's files exactly as `edgekit deploy` stages them (the bundle's
files, manifest.json and its signature, run.env and SHA256SUMS for the baseline module) and
`edgekit-plan` + `edgekit-plan.sig`: what the host resolves from the manifest so the device
parses no JSON — the release id, the IREE runtime version, the hooks (octal escapes, as the
Ansible export sends them), and one line per validation sample and output with its golden
file and the limits `edgekit deploy` compares with (validate/tolerance.py, including whether
the arg-max is checked, which depends on the golden values). The plan is signed with the
user's key (namespace edgekit-bundle, the namespace a device's allowed signers grant), and the
device checks that signature as verify.sh checks the manifest's.

Used by the pull channel (edgekit/channel/publish.py) and by the Mender export, whose
artifact's payload is this directory.

Plan format (`edgekit-plan 1`, one `key value` per line):
    app NAME | release ID | created ISO-TIME | runtime IREE-VERSION | samples N
    inputs_differ 0|1 | hook_timeout S | hook after_activate OCTAL|- | hook health OCTAL|-
    out K I FILE GOLDEN CODEC DESCR SHAPE ATOL RTOL MINCOS EXACT TOP1 JUDGE NAME
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgekit.device.deploy import release_extras, release_id
from edgekit.errors import BundleError, UninformativeGolden
from edgekit.models.bundle import MANIFEST, SIGNATURE, Bundle, sha256_file
from edgekit.toolchain.runner import run_tool
from edgekit.toolchain.signing import INSTALL_HINT, NAMESPACE, signing_key, trusted_signers
from edgekit.validate.compare import dtype_name, wants_top1
from edgekit.validate.golden import check_golden
from edgekit.validate.outputs import output_file, read_output
from edgekit.validate.tolerance import output_limits

PLAN = "edgekit-plan"
PLAN_SIG = "edgekit-plan.sig"
# the dtypes install_bundle.sh decodes (od -t u4/u2 for floats, bit-exact)
CODECS = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
          "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
          "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "b1"}


@dataclass(frozen=True)
class Payload:
    app: str
    release: str
    created_at: str
    directory: Path
    files: dict[str, str]       # relative path -> sha256, every file of the payload


def write_payload(bundle: Bundle, out: Path, sign: bool = True) -> Payload:
    """Write `bundle`'s device payload into the new directory `out` (BundleError for a bundle
    a device cannot validate on its own; UninformativeGolden as at build time)."""
    m = bundle.manifest
    bundle.verify()
    if not bundle.file(SIGNATURE).is_file():
        raise BundleError("the bundle is not signed; a device installs only signed releases",
                          where=str(bundle.path), hint="sign it: `edgekit sign BUNDLE`")
    out.mkdir(parents=True)
    for rel in (MANIFEST, SIGNATURE, *m.files):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle.file(rel), out / rel)
    for extra in release_extras(bundle, out):
        if extra.parent != out:
            shutil.copyfile(extra, out / extra.name)
    (out / PLAN).write_text(plan_text(bundle))
    if sign:
        sign_file(out / PLAN, out / PLAN_SIG)
    files = {str(p.relative_to(out)): sha256_file(p) for p in sorted(out.rglob("*"))
             if p.is_file()}
    return Payload(app=m.app, release=release_id(bundle), created_at=m.created_at,
                   directory=out, files=files)


def sign_file(path: Path, signature: Path) -> None:
    """ssh-keygen -Y sign `path` with the user's signing key into `signature`."""
    key = signing_key()
    trusted_signers()
    made = path.with_name(path.name + ".sig")
    made.unlink(missing_ok=True)
    run_tool(["ssh-keygen", "-q", "-Y", "sign", "-f", key, "-n", NAMESPACE, path],
             what=f"signing {path.name}", timeout=60, hint=INSTALL_HINT)
    if made != signature:
        made.replace(signature)


def _octal(command: str | None) -> str:
    return "".join(f"\\0{byte:03o}" for byte in command.encode()) if command else "-"


def _number(x: float) -> str:
    return repr(float(x))


def plan_text(bundle: Bundle) -> str:
    m = bundle.manifest
    samples = [(m.golden_inputs, m.golden_outputs),
               *((s.inputs, s.outputs) for s in m.more_golden)]
    golden = [[read_output(bundle.file(path), sig.dtype) for sig, path in zip(m.outputs, outs)]
              for _, outs in samples]
    inputs = [[np.load(bundle.file(p), allow_pickle=False) for p in ins] for ins, _ in samples]
    names = [sig.name for sig in m.outputs]
    # the build refused these already; a bundle edited since is refused again here
    check_golden(m.tolerances, names, golden, inputs, where=str(bundle.path))
    inputs_differ = len(inputs) < 2 or any(
        len(o) != len(inputs[0]) or any(a.shape != b.shape or not np.array_equal(a, b)
                                        for a, b in zip(o, inputs[0])) for o in inputs[1:])
    hooks = m.hooks
    lines = ["edgekit-plan 1", f"app {m.app}", f"release {release_id(bundle)}",
             f"created {m.created_at}", f"runtime {m.compiler_version}",
             f"samples {len(samples)}", f"inputs_differ {int(inputs_differ)}",
             f"hook_timeout {hooks.timeout_s if hooks else 120:g}",
             f"hook after_activate {_octal(hooks.after_activate if hooks else None)}",
             f"hook health {_octal(hooks.health if hooks else None)}"]
    for k, (_, outs) in enumerate(samples):
        for i, (sig, path) in enumerate(zip(m.outputs, outs)):
            expected = golden[k][i]
            codec = CODECS.get(dtype_name(expected))
            if codec is None:
                raise BundleError(
                    f"output '{sig.name}' is {dtype_name(expected)}, which a device cannot "
                    "compare without Python", where=str(bundle.path),
                    hint="deploy it with `edgekit deploy` (the host compares the outputs)")
            lim = output_limits(m.tolerances, sig.name, dtype_name(expected))
            shape = ",".join(str(d) for d in expected.shape) or "scalar"
            file = output_file(i, sig.dtype)
            descr = np.dtype(expected.dtype).str if file.endswith(".npy") else "raw"
            name = re.sub(r"[^A-Za-z0-9._-]", "_", sig.name) or f"output_{i}"
            lines.append(" ".join([
                "out", str(k), str(i), file, path, codec, descr, shape, _number(lim.atol),
                _number(lim.rtol), _number(lim.min_cosine), str(int(lim.exact)),
                str(int(wants_top1(lim.top1, sig.name, expected))),
                str(int(not m.tolerances.accepts_uninformative(sig.name))), name]))
    return "\n".join(lines) + "\n"


__all__ = ["PLAN", "PLAN_SIG", "Payload", "UninformativeGolden", "plan_text", "sign_file",
           "write_payload"]
