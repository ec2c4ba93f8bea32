"""The kernel census's pure logic: ELF objects cut out of a module, the hot-loop rule, the
instruction kinds counted (real disassembly: tests/integration/test_kernels.py)."""

import struct

import pytest

from edgekit.compile.kernels import Instruction, census, embedded_objects, hot_loop, target_cpu

pytestmark = pytest.mark.unit


def elf(machine: int, body: bytes = b"") -> bytes:
    """A 64-bit little-endian ELF header whose section table ends the object."""
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<H", header, 0x12, machine)
    struct.pack_into("<Q", header, 0x28, 64 + len(body))           # section headers after body
    struct.pack_into("<HH", header, 0x3A, 64, 2)
    return bytes(header) + body + bytes(128)


def test_objects_are_cut_out_by_their_headers_and_machines():
    a64, x86 = elf(183, b"code" * 10), elf(62)
    module = b"flatbuffer\x7fELF-not-a-header" + a64 + b"pad" + x86 + b"\x7fELF"
    assert embedded_objects(module) == [("aarch64", a64), ("x86_64", x86)]
    assert embedded_objects(b"no executables") == []


def body(*lines: str, start: int = 0x1000) -> list[Instruction]:
    out = []
    for n, line in enumerate(lines):
        mnemonic, _, operands = line.partition(" ")
        out.append(Instruction(start + 4 * n, mnemonic, operands))
    return out


def test_the_hot_loop_is_the_one_with_the_most_instructions_of_its_own():
    code = body("mov x0, #0",                              # 0x1000
                "fmla v0.4s, v1.4s, v2.4s",                # 0x1004  outer loop starts
                "fmla v3.4s, v1.4s, v2.4s",
                "fmla v4.4s, v1.4s, v2.4s",
                "ldr q1, [x1], #16",                       # 0x1010  inner copy loop
                "subs x2, x2, #1",
                "b.ne 0x1010 <.text+0x10>",                # 0x1018
                "str q0, [sp, #16]",
                "subs x3, x3, #1",
                "b.ne 0x1004 <.text+0x4>",                 # 0x1024
                "ret")
    loop, count = hot_loop(code, "aarch64")
    assert count == 2
    assert (loop.start, loop.end) == (0x1004, 0x1024)      # 6 own instructions beat 3
    assert census(loop.instructions, "aarch64") == {"instructions": 9, "fmla.4s": 3,
                                                      "stack spill/reload": 1}
    assert hot_loop(body("add x0, x0, #1", "ret"), "aarch64") == (None, 0)
    # a forward branch is no loop
    assert hot_loop(body("cbz x0, 0x1008 <.text+0x8>", "nop", "ret"), "aarch64")[1] == 0


def test_census_tells_dot_products_from_widening_multiplies_and_scalar_fallbacks():
    counts = census(body("sdot v0.4s, v1.16b, v2.4b[0]", "usdot v0.4s, v1.16b, v2.16b",
                         "smmla v0.4s, v1.16b, v2.16b", "smlal v0.4s, v1.4h, v2.4h",
                         "fmadd s0, s1, s2, s3", "fmla v0.2s, v1.2s, v2.2s"), "aarch64")
    assert counts == {"instructions": 6, "sdot": 1, "usdot": 1, "smmla": 1,
                      "widening int (no dot product)": 1, "scalar fp": 1, "fmla.2s": 1}
    x86 = census(body("vfmadd231ps %zmm1, %zmm2, %zmm0", "vpdpbusd %zmm1, %zmm2, %zmm0",
                      "vfmadd231ss %xmm1, %xmm2, %xmm0", "vmovups %zmm0, 64(%rsp)"), "x86_64")
    assert x86 == {"instructions": 4, "fma.zmm": 1, "vnni vpdpbusd": 1, "scalar fp": 1,
                   "stack spill/reload": 1}


def test_the_target_cpu_comes_from_the_compile_flags():
    assert target_cpu(("--iree-llvmcpu-target-cpu=cortex-a72", "--iree-opt-data-tiling")) \
        == "cortex-a72"
    assert target_cpu(("--iree-hal-target-backends=vulkan-spirv",)) is None
