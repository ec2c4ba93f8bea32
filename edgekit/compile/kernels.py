"""What instructions a CPU bundle's dispatches run, without the board (issue 37).

An llvm-cpu module (.vmfb) embeds one ELF shared object per executable. They are cut out of the
module by their ELF headers, disassembled with LLVM's `llvm-objdump -d`, and each dispatch
function's hot loop gets an instruction census and an llvm-mca estimate of its cycles per
iteration on the target's CPU.

The hot loop rule (simple on purpose): a loop is a direct branch to an address at or before
itself inside the same function (a backward branch); its body is [target, branch]. A loop's own
instructions are those of its body outside the loops nested in it. The hot loop is the loop
with the most instructions of its own: after vectorisation and unrolling the compute kernel is
the biggest straight-line body, while the copies, packs and remainders nested in it or around
it are short. Dispatches are ranked by their
code size (the biggest function first); nothing here is timed, and the cycle counts are
llvm-mca's static estimates, not measurements.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.errors import ConfigError

_ELF = b"\x7fELF"
_MACHINES = {183: "aarch64", 62: "x86_64"}
# aarch64 direct branches (target is an address operand) and x86's jumps
_A64_BRANCH = re.compile(r"^(b|b\.\w+|cbn?z|tbn?z)$")
_X86_BRANCH = re.compile(r"^j\w+$")
_VEC_LANES = re.compile(r"\bv\d+\.(\d+)([bhsd])\b")
_SCALAR_FP = re.compile(r"^\s*[hsd]\d+\b")
_A64_EXTENSIONS = "+neon,+dotprod,+i8mm,+fullfp16,+bf16"
_COMMENT = re.compile(r"\s*(//|#|<).*$")


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str
    operands: str


@dataclass
class Loop:
    start: int                        # the backward branch's target
    end: int                          # the branch itself
    instructions: list[Instruction]

    def contains(self, other: Loop) -> bool:
        return self is not other and self.start <= other.start and other.end <= self.end


@dataclass
class KernelReport:
    function: str
    size: int                         # bytes of code
    loops: int                        # backward branches in the function
    hot_loop: tuple[int, int] | None  # [start, end] addresses of the hot loop
    census: dict[str, int] = field(default_factory=dict)
    cycles_per_iteration: float | None = None   # llvm-mca estimate
    estimate_note: str = ""


def embedded_objects(module: bytes) -> list[tuple[str, bytes]]:
    """(architecture, ELF bytes) of every 64-bit little-endian ELF inside a module."""
    found, at = [], module.find(_ELF)
    while at >= 0:
        header = module[at:at + 64]
        if len(header) == 64 and header[4] == 2 and header[5] == 1:      # ELFCLASS64, LSB
            machine = struct.unpack_from("<H", header, 0x12)[0]
            shoff = struct.unpack_from("<Q", header, 0x28)[0]
            shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
            size = shoff + shentsize * shnum
            if machine in _MACHINES and 64 < size <= len(module) - at:
                found.append((_MACHINES[machine], module[at:at + size]))
                at = module.find(_ELF, at + size)
                continue
        at = module.find(_ELF, at + 4)
    return found


def tool(name: str) -> str:
    """An LLVM tool on PATH, plain or Debian's versioned name."""
    for candidate in (name, *(f"{name}-{v}" for v in range(20, 13, -1))):
        if path := shutil.which(candidate):
            return path
    raise ConfigError(f"{name} is not installed", key=name,
                      hint="install Debian's LLVM: apt-get install llvm")


def disassemble(elf: bytes, arch: str = "aarch64") -> dict[str, list[Instruction]]:
    """Function name → its instructions. IREE strips the symbol table but keeps DWARF: each
    DW_TAG_subprogram's [low_pc, high_pc) names a slice of llvm-objdump's `.text`. aarch64's
    optional extensions are decoded only when named (LLVM 14 shows sdot as `<unknown>`)."""
    mattr = [f"--mattr={_A64_EXTENSIONS}"] if arch == "aarch64" else []
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(elf)
        f.flush()
        text = subprocess.run([tool("llvm-objdump"), "-d", "--no-show-raw-insn", *mattr, f.name],
                              capture_output=True, text=True, check=True, timeout=300).stdout
        dwarf = subprocess.run([tool("llvm-dwarfdump"), "--debug-info", f.name],
                               capture_output=True, text=True, check=True, timeout=300).stdout
    every = [Instruction(int(m.group(1), 16), m.group(2), m.group(3).strip())
             for m in re.finditer(r"^\s*([0-9a-f]+):\s+(\S+)[ \t]*(.*)$", text, re.M)]
    functions: dict[str, list[Instruction]] = {}
    for entry in dwarf.split("DW_TAG_subprogram")[1:]:
        low = re.search(r"DW_AT_low_pc\s*\((0x[0-9a-f]+)\)", entry)
        high = re.search(r"DW_AT_high_pc\s*\((0x[0-9a-f]+)\)", entry)
        name = re.search(r"DW_AT_name\s*\(\"([^\"]+)\"\)", entry)
        if low and high and name:
            lo, hi = int(low.group(1), 16), int(high.group(1), 16)
            functions[name.group(1)] = [i for i in every if lo <= i.address < hi]
    return functions


def branch_target(ins: Instruction, arch: str) -> int | None:
    pattern = _A64_BRANCH if arch == "aarch64" else _X86_BRANCH
    if not pattern.match(ins.mnemonic):
        return None
    m = re.search(r"(?:0x)?([0-9a-f]+) <", ins.operands)
    return int(m.group(1), 16) if m else None


def loops(body: list[Instruction], arch: str) -> list[Loop]:
    """Every backward branch of a function as a loop (see the module's rule)."""
    found = []
    for ins in body:
        target = branch_target(ins, arch)
        if target is not None and body[0].address <= target <= ins.address:
            found.append(Loop(target, ins.address,
                              [i for i in body if target <= i.address <= ins.address]))
    return found


def hot_loop(body: list[Instruction], arch: str) -> tuple[Loop | None, int]:
    """(the loop with the most instructions of its own, how many loops the function has)."""
    every = loops(body, arch)

    def own(lp: Loop) -> int:
        inner = {i.address for o in every if lp.contains(o) for i in o.instructions}
        return sum(1 for i in lp.instructions if i.address not in inner)
    return max(every, key=own, default=None), len(every)


def census(instructions: list[Instruction], arch: str) -> dict[str, int]:
    """Counts of the instruction kinds that say how a loop computes."""
    counts: Counter[str] = Counter(instructions=len(instructions))
    for ins in instructions:
        mn, ops = ins.mnemonic, ins.operands
        if mn == "<unknown>":
            counts["undecoded"] += 1
        if arch == "aarch64":
            lanes = _VEC_LANES.search(ops)
            if mn in ("fmla", "fmls") and lanes:
                counts[f"fmla.{lanes.group(1)}{lanes.group(2)}"] += 1
            elif mn in ("fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fmul", "fadd") \
                    and _SCALAR_FP.match(ops):
                counts["scalar fp"] += 1
            elif mn in ("sdot", "udot", "usdot", "sudot"):
                counts[mn] += 1
            elif mn in ("smmla", "ummla", "usmmla", "bfmmla"):
                counts[mn] += 1
            elif mn in ("madd", "msub", "mul", "smaddl", "umaddl"):
                counts["scalar int mul"] += 1
            elif mn in ("smull", "smull2", "smlal", "smlal2", "sadalp", "saddw", "saddw2"):
                counts["widening int (no dot product)"] += 1
            if mn.startswith(("ld", "st")) and "[sp" in ops:
                counts["stack spill/reload"] += 1
        else:
            if mn.startswith(("vfmadd", "vfnmadd")):
                width = "zmm" if "zmm" in ops else "ymm" if "ymm" in ops else "xmm"
                kind = "scalar fp" if mn.endswith(("ss", "sd")) else f"fma.{width}"
                counts[kind] += 1
            elif mn in ("vpdpbusd", "vpdpbusds", "vpdpwssd", "vpdpwssds"):
                counts[f"vnni {mn}"] += 1
            elif mn in ("vpmaddwd", "vpmaddubsw"):
                counts[mn] += 1
            if "(%rsp)" in ops or "[rsp" in ops:
                counts["stack spill/reload"] += 1
    return dict(counts)


def mca_estimate(instructions: list[Instruction], arch: str, cpu: str) -> tuple[float | None, str]:
    """llvm-mca's cycles per iteration of a loop body on `cpu` (branches dropped: their
    operands are addresses llvm-mca cannot assemble)."""
    triple = "aarch64" if arch == "aarch64" else "x86_64"
    lines = [f"{i.mnemonic} {_COMMENT.sub('', i.operands)}".strip()
             for i in instructions if branch_target(i, arch) is None]
    mca = tool("llvm-mca")
    version = re.search(r"-(\d+)$", mca)
    label = f"llvm-mca{' ' + version.group(1) if version else ''} -mcpu={cpu}, an estimate"
    attrs = _A64_EXTENSIONS if arch == "aarch64" else ""
    run = subprocess.run([mca, f"-mtriple={triple}", f"-mcpu={cpu}",
                          *([f"-mattr={attrs}"] if attrs else []), "-iterations=100"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=120)
    total = re.search(r"Total Cycles:\s+(\d+)", run.stdout)
    if run.returncode != 0 or not total:
        why = (run.stderr.strip().splitlines() or ["no output"])[0][:160]
        return None, f"llvm-mca could not estimate: {why}"
    return int(total.group(1)) / 100, label


def target_cpu(flags: tuple[str, ...]) -> str | None:
    """The CPU a module was compiled for, from its iree-compile flags."""
    cpus = [f.split("=", 1)[1] for f in flags if f.startswith("--iree-llvmcpu-target-cpu=")]
    return cpus[-1] if cpus else None


def kernel_reports(module: Path, cpu: str | None, top: int | None = None,
                   estimate: bool = True) -> tuple[str, list[KernelReport]]:
    """(architecture, a report per dispatch function, biggest first) of a module."""
    objects = embedded_objects(module.read_bytes())
    if not objects:
        raise ConfigError(f"{module}: no CPU executable inside (is it an llvm-cpu build?)",
                          key="module", hint="--kernels reads llvm-cpu modules only")
    arch = objects[0][0]
    functions: list[tuple[str, list[Instruction]]] = []
    for _, elf in objects:
        functions += [(name, body) for name, body in disassemble(elf, arch).items()
                      if body and "dispatch" in name]
    functions.sort(key=lambda f: f[1][-1].address - f[1][0].address, reverse=True)
    mca_cpu = cpu if cpu and cpu != "host" else ("generic" if arch == "aarch64" else "native")
    reports = []
    for name, body in functions[:top]:
        loop, count = hot_loop(body, arch)
        report = KernelReport(name, body[-1].address - body[0].address + 4, count,
                              (loop.start, loop.end) if loop else None,
                              census(loop.instructions if loop else body, arch))
        if loop and estimate:
            report.cycles_per_iteration, report.estimate_note = \
                mca_estimate(loop.instructions, arch, mca_cpu)
        elif not loop:
            report.estimate_note = "no loop: straight-line code (census of the whole function)"
        reports.append(report)
    return arch, reports
