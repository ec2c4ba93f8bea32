"""Gaps the README walkthrough at 80 columns found (issue 20): the check table and the target
list read at 80 columns, `devices trust` of an unregistered bare word, reasons said once."""


import pytest
from click.testing import CliRunner

from edgekit.cli import render
from edgekit.cli.main import cli
from edgekit.device.bench import latency_stats, merged_reasons
from edgekit.models.bench import Conditions
from edgekit.pipeline.check import CheckReport, OpStatus

pytestmark = pytest.mark.unit



def fits(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_the_check_table_fits_80_columns_with_each_failure_on_its_own_line(narrow):
    failure = ("tosa: failed to legalize operation 'torch.aten.atan2' that was explicitly "
               "marked illegal (aten.atan2.default @ head, model.py:12)")
    report = CheckReport(model="recipes/some_long_model_name.yaml", kind="pytorch",
                         target="rpi4", chosen="linalg",
                         ops=[OpStatus("aten.atan2.default", 2, True, False, True, True,
                                       failure=failure),
                              OpStatus("aten.linear.default", 3, True, True, True, True)])
    render.check_table(report)
    text = narrow.getvalue()
    assert fits(text), text
    assert "compile" in text and "aten.linear.default" in text
    assert f"aten.atan2.default: {failure}" in " ".join(text.split())


def test_the_target_list_fits_80_columns_with_every_name_whole(narrow):
    result = CliRunner().invoke(cli, ["targets", "list"])
    assert result.exit_code == 0, result.output
    text = narrow.getvalue()
    assert fits(text), text
    for name in ("aarch64-generic", "vulkan-generic", "vulkan-spirv", "cortex-a72"):
        assert name in text


def test_devices_trust_of_an_unregistered_word_names_the_registered_devices(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["devices", "trust", "lab-x86_64-1"])
    assert result.exit_code == 2
    assert "unknown device 'lab-x86_64-1'; registered devices: none" in result.output


def test_a_reason_that_holds_in_several_rounds_is_said_once():
    def busy(pct):
        return Conditions(cpu_busy_pct=pct, loadavg=(3.0, 3.0, 3.0))
    stats = latency_stats([1.0] * 8, [1.0, 1.0])
    reasons = merged_reasons([(busy(95), busy(20)), (busy(88), busy(20))], stats)
    assert len(reasons) == 1 and reasons[0].startswith("heavy load: CPUs 95% busy"), reasons
    assert "in 2 of 2 rounds" in reasons[0]


def test_a_quantization_mode_breaks_at_its_hyphen_not_mid_word(narrow):
    from types import SimpleNamespace as NS
    rows = [NS(mode="int8-weights", status="failed", reason="stage compile: no", bundle=None,
               size=0, p50_ms=None, measured_on="", quantization=None)]
    render.quantization_comparison(rows)
    lines = [line.strip() for line in narrow.getvalue().splitlines()]
    assert "int8-" in [line.split()[0] for line in lines if line] and \
        any(line.startswith("weights") for line in lines), narrow.getvalue()
