"""`host`'s int8 default asks for the u8 form only on x86 with AVX-512 VNNI (pipeline/build.py:
rewrite_flags); other targets keep their own `--edgekit-int8-convs-as-matmul`."""

from types import SimpleNamespace

from edgekit.config.profiles import load_target
from edgekit.pipeline.build import U8, rewrite_flags, vnni


def _profile(tmp_path, features: str):
    path = tmp_path / f"x86{len(features)}.yaml"
    path.write_text("extends: host\ncpu: {triple: x86_64-unknown-linux-gnu, cpu: icelake-server, "
                    f"features: '{features}'}}\n")
    return load_target(str(path))


def _flags(target, flags=(), lowering="auto"):
    exported = SimpleNamespace(quantization=SimpleNamespace(mode="int8"))
    return rewrite_flags(SimpleNamespace(target=target, flags=flags, lowering=lowering),
                         exported)


def test_u8_only_where_the_cpu_has_vnni(tmp_path):
    with_vnni = _profile(tmp_path, "+avx512f,+avx512bw,+avx512vnni")
    without = _profile(tmp_path, "+avx2,+fma")
    assert vnni(with_vnni) and not vnni(without)
    assert U8 in _flags(with_vnni)
    assert _flags(without)[0] == "--edgekit-int8-convs-as-matmul=on"
    # a recipe's own flag comes after the profile's and wins
    assert _flags(without, (U8,))[-1] == U8


def test_u8_only_through_the_torch_lowering(tmp_path):
    with_vnni = _profile(tmp_path, "+avx512f,+avx512bw,+avx512vnni")
    assert U8 in _flags(with_vnni, lowering="torch")
    # tosa asked for: the s8 form (the inner-tiled flag u8 adds fails on tosa's batch matmuls)
    assert _flags(with_vnni, lowering="tosa")[0] == "--edgekit-int8-convs-as-matmul=on"


def test_arm_targets_keep_their_int8_form():
    for name in ("rpi5", "rk3588-cpu"):
        target = load_target(name)
        assert not vnni(target)
        assert _flags(target) == ("--edgekit-int8-convs-as-matmul=on",)


def test_host_asks_for_u8():
    assert U8 in load_target("host").quantize_flags["int8"]
