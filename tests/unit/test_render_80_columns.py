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


def test_the_fleet_update_title_is_one_line_at_80_columns(narrow):
    from edgekit.models.fleet import DeviceOutcome, FleetResult, WaveSummary
    devices = tuple(DeviceOutcome(device=f"pi-{i}", address=f"pi@192.0.2.{i}", target="rpi4",
                                  wave=1, status="updated",
                                  seconds=2.5)
                    for i in range(2))
    wave = WaveSummary(index=1, devices=("pi-0", "pi-1"), updated=2, unchanged=0, failed=0,
                       allowed_failures="0", halted=False, complete=True, seconds=5.0)
    render.fleet_result(FleetResult(id="20261202-093000-kws-mlp", app="kws-mlp-keyword-spotter",
                                    status="completed", releases={}, waves=(wave,),
                                    devices=devices, seconds=12.3, journal="j"))
    lines = narrow.getvalue().splitlines()
    assert ("rollout 20261202-093000-kws-mlp: kws-mlp-keyword-spotter — completed in 12.3 s"
            in lines)
    assert fits(narrow.getvalue())


def test_releases_with_none_is_one_line_and_no_empty_table(narrow):
    render.releases_table("pi-1", "kws-mlp", [])
    assert narrow.getvalue().strip() == "no releases of kws-mlp on pi-1"


def test_bisect_tables_share_the_other_tables_style_and_label_every_column(narrow):
    from types import SimpleNamespace as NS

    from edgekit.cli.bisect import _table
    check = NS(max_abs_error=0.228, cosine=0.991658, ok=False)
    row = NS(check=check, fp32=None, tap=NS(module="", op="aten.mean.dim"))
    table = _table(NS(name="module boundaries", rows=[row]), None)
    assert table.box is render.fitted_table("t", []).box
    assert [c.header for c in table.columns] == ["#", "module", "op", "max abs err", "cosine",
                                                 "verdict"]
    render.out.print(table)
    assert "beyond tolerance" in narrow.getvalue() and fits(narrow.getvalue())
