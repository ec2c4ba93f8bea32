"""NPU families are plug-ins: the registry maps a profile's `npu.kind` to its family, and a
build's one plan per target is the CPU path's plan edited by that family (no family: the CPU
path's plan as it is)."""

import pytest

from edgekit.config.profiles import load_target
from edgekit.errors import ConfigError
from edgekit.models.bundle import NpuEstimate, NpuNote, NpuOp
from edgekit.pipeline.build import PLAN, plan_for
from edgekit.pipeline.npu import registry
from edgekit.pipeline.npu.family import NpuFamily

# target with an NPU → the CPU path's stages its family replaces, and the stages it adds
FAMILY_STAGES = {
    "imx93-npu": ({"quantize"}, ["quantize+partition (npu)", "check+reference model+Vela (npu)",
                                 "npu"]),
    "ethos-u55-128": ({"quantize", "rewrite", "import", "lower+compile", "check quantization",
                       "compile variants", "package"},
                      ["quantize+partition (npu)", "check+reference model+Vela (npu)",
                       "package (npu only)"]),
    "rk3588-npu": (set(), ["npu"]),
}


def test_each_npu_kind_of_the_profiles_has_a_family_and_cpu_targets_none():
    for kind in registry.FAMILIES:
        family = registry.family_named(kind)
        assert isinstance(family, NpuFamily) and family.kind == kind and family.toolchains
    assert registry.family_for(load_target("rpi4")) is None
    assert registry.family_for(load_target("rk3588-npu")).kind == "rknpu"


def test_an_unknown_kind_lists_the_families():
    with pytest.raises(ConfigError) as err:
        registry.family_named("tpu")
    assert all(kind in err.value.hint for kind in registry.FAMILIES)


def test_a_cpu_target_runs_the_cpu_plan_whole():
    assert plan_for(load_target("rpi4")) is PLAN


@pytest.mark.parametrize("target", sorted(FAMILY_STAGES))
def test_an_npu_target_runs_the_same_plan_plus_its_familys_stages(target):
    replaced, added = FAMILY_STAGES[target]
    plan = plan_for(load_target(target))
    assert [s for s in plan if s in PLAN] == [s for s in PLAN if s.name not in replaced]
    assert [s.name for s in plan if s not in PLAN] == added
    assert plan[-1].name == "store" and [s.name for s in plan].index("cache") < \
        [s.name for s in plan].index(added[-1])


def test_each_build_gets_its_own_family_stages():
    first, second = (plan_for(load_target("imx93-npu")) for _ in range(2))
    assert [s for s in first if s not in PLAN] != [s for s in second if s not in PLAN]


def _note(kind: str) -> NpuNote:
    return NpuNote(kind=kind, accelerator="acc-1", artifact="npu/m.bin",
                   compiler={"compiler": "1.0"},
                   ops=(NpuOp(op="conv", placement="npu", macs=90),
                        NpuOp(op="atan2", placement="cpu", reason="no [integer] form", macs=10)),
                   npu_mac_share=0.9, validated_on="a simulator", worst_lsb=1,
                   estimate=NpuEstimate(source="static estimate", cycles=1000, clock_hz=10**9,
                                        inferences_per_s=1e6, sram_kib=1.0, dram_kib=2.0),
                   checks=("checked",))


@pytest.mark.parametrize("kind", sorted(registry.FAMILIES))
def test_a_familys_summary_names_the_split_the_estimate_and_what_validated_it(kind):
    text = "\n".join(line.text for line in registry.summary(_note(kind)))
    assert "acc-1" in text and "atan2" in text and "no [integer] form" in text
    assert "static estimate" in text and "a simulator" in text and "checked" in text


def test_a_bundle_of_a_family_this_edgekit_lacks_gets_one_plain_line():
    lines = registry.summary(_note("tpu"))
    assert len(lines) == 1 and "tpu" in lines[0].text and "acc-1" in lines[0].text


def test_check_on_a_family_that_places_ops_only_while_building_names_the_build():
    with pytest.raises(ConfigError, match="places ops only while it compiles"):
        registry.family_named("rknpu").refuse_unless_it_places_ops(load_target("rk3588-npu"))
    registry.family_named("ethos-u").refuse_unless_it_places_ops(load_target("imx93-npu"))
