"""What the CLI says matches what it decided, and its tables fit an 80-column terminal
(issue 20): refusing to compare unlike benchmark results, saying when there is nothing to
compare, and every gate showing the figure it decided on."""

import io

import pytest
from click.testing import CliRunner
from rich.console import Console

from edgekit.cli import render
from edgekit.cli.main import cli
from edgekit.device.bench import latency_stats
from edgekit.device.history import compare, store
from edgekit.models.bench import BenchResult, Conditions

CALM = Conditions(cores=4, cpu_busy_pct=2.0)


def result(id, device="lab-x86_64-1", target="host", release="r1", ms=1.0, created="01"):
    samples = [ms * (1 + 0.001 * (i % 5)) for i in range(20)]
    return BenchResult(id=id, created_at=f"2026-01-01T00:00:{created}", device=device,
                       device_arch="x86_64", app="kws-mlp", release=release, target=target,
                       config={"threads": 1, "driver": "local-sync"},
                       latency=latency_stats(samples, [ms] * 4), peak_rss_kb=1, before=CALM,
                       after=CALM, reliable=True)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEKIT_HOME", str(tmp_path))
    return tmp_path



def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def fits(text: str, width: int = 80) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_results_of_different_devices_or_targets_are_not_compared_without_force(home, narrow):
    store(result("a", device="lab-x86_64-1", target="host", ms=0.001))
    store(result("b", device="lab-aarch64-1", target="rpi4", release="r2", ms=1.0,
                 created="02"))
    refused = invoke("bench", "compare", "a", "b")
    assert refused.exit_code == 2
    assert refused.output.count("\n") == 2    # the error and its hint
    assert "device lab-x86_64-1 vs lab-aarch64-1" in refused.output
    assert "target host vs rpi4" in refused.output and "--force" in refused.output
    assert narrow.getvalue() == ""

    forced = invoke("bench", "compare", "a", "b", "--force")
    table = narrow.getvalue()
    assert forced.exit_code == 9               # still slower beyond the noise: said and coded
    assert "previous release" not in table and "a vs b (forced: device" in table
    assert "+99900.0%" in table and fits(table)
    lines = [line.strip() for line in table.splitlines()]
    # both devices, base over new (as the releases and latencies are)
    assert any(line.startswith("lab-x86_64-1 ") for line in lines), table
    assert any(line.startswith("→ lab-aarch64-1 ") for line in lines), table


def test_nothing_to_compare_is_said_and_is_no_failure(home, narrow):
    store(result("only"))
    said = invoke("bench", "compare")
    assert said.exit_code == 0 and "nothing to compare" in said.output
    assert invoke("bench", "compare", "--json").output.strip() == "[]"


def test_the_comparison_table_fits_80_columns_with_every_figure_whole(narrow):
    base = result("a", release="3f9a0c1d2e4b5a69", ms=0.0921)
    new = result("b", release="8c1d2e4b5a693f9a", ms=91.4, created="02")
    render.comparison_table([compare(base, new)], title="a vs b")
    table = narrow.getvalue()
    assert fits(table), table
    for figure in ("0.092", "91.583", "lab-x86_64-1", "REGRESSION", "kws-mlp"):
        assert figure in table, table
    assert "…" not in table


def outcome(device, status, reason="", ratio=None, **more):
    from edgekit.models.fleet import DeviceOutcome
    return DeviceOutcome(device=device, address="root@127.0.0.7:2201", target="host", wave=1,
                         status=status, reason=reason, p90_ratio=ratio, **more)


def fleet(*devices):
    from edgekit.models.fleet import FleetResult, WaveSummary
    return FleetResult(id="kws-mlp-20261130T210000-ab12", app="kws-mlp", status="halted",
                       releases={"host": "r2"}, seconds=42.0, journal="/j",
                       waves=(WaveSummary(index=1, devices=tuple(d.device for d in devices),
                                          updated=1, unchanged=0, failed=1,
                                          allowed_failures="0", halted=True, complete=True,
                                          seconds=40.0),),
                       devices=devices)


def test_the_fleet_table_shows_the_ratio_the_gate_decided_on_and_fits_80_columns(narrow):
    long_reason = ("latency gate: p90 0.236 ms vs 0.092 ms for the release it replaces "
                   "(3f9a0c1d2e4b5a69); per-round ratio ×2.57 > ×1.25 in 5 of 5 rounds; "
                   "not activated (root@127.0.0.7:2201)")
    render.fleet_result(fleet(
        outcome("kitchen-pi", "updated", ratio=1.02, p90_ratio_range=(0.97, 1.08),
                p90_ratio_limit=1.25, p90_before_ms=0.092, p90_after_ms=0.094),
        outcome("garage-pi", "failed", long_reason, ratio=2.57, p90_ratio_range=(2.4, 2.7),
                p90_ratio_limit=1.25, p90_before_ms=0.092, p90_after_ms=0.236)))
    text = narrow.getvalue()
    assert fits(text), text
    assert "×1.02 [0.97–1.08] ≤ ×1.25" in text and "×2.57 [2.40–2.70] > ×1.25" in text
    # the reason is a line of its own below the table, not a narrow column of 13 lines
    assert "garage-pi: latency gate" in text
    assert "root@127.0.0.7" not in text.split("garage-pi: latency")[0]   # names, not addresses


def test_a_tuned_build_says_auto_chose_the_tuned_variant_not_that_torch_was_requested():
    from types import SimpleNamespace as NS
    tuned = NS(tuning=NS(variant="torch/o3"), lowering=NS(requested="torch", used="torch"))
    assert render.requested_lowering(tuned) == "auto; tuned variant torch/o3"
    plain = NS(tuning=None, lowering=NS(requested="auto", used="tosa"))
    assert render.requested_lowering(plain) == "requested auto"


def tuning_record(n_ok=44):
    from edgekit.tune.tuner import CandidateResult, TuningRecord

    def cand(lowering, flag_set, p50, status="ok", reason=""):
        rounds = tuple(p50 * (1 + 0.01 * (i % 3)) for i in range(5)) if p50 else ()
        return CandidateResult(lowering=lowering, flag_set=flag_set, flags=(), threads=1,
                               status=status, reason=reason, p50_ms=p50, round_p50_ms=rounds,
                               module_bytes=274_112 if p50 else 0)
    default = cand("tosa", "default", 1.8593)
    others = [cand("linalg", f"convs-as-matmul+data-tiling-{i}", 1.8505 + i / 100)
              for i in range(n_ok)]
    broken = cand("torch", "o3+ukernels", None, "build-failed",
                  "stage compile: 'func.func' op exceeded stack allocation limit of 32768 "
                  "bytes (iree-compile exit 1); see the reproducer")
    return TuningRecord(model_digest="d", app="kws-mlp", target="rpi4", toolchain={},
                        measured_on="lab-aarch64-1", created_at="now", chosen=default,
                        default_variant="tosa/default", default_p50_ms=1.8593,
                        candidates=(default, *others, broken), fastest=others[0].variant,
                        gain_pct=0.47, noise_pct=0.5)


def test_the_tuning_table_fits_80_columns_and_shows_each_wins_noise(narrow):
    from edgekit.cli.tune import tuning_table
    tuning_table(tuning_record())
    text = narrow.getvalue()
    assert fits(text), text
    assert "274,112" in text and "…" not in text.split("chosen:")[0]
    assert "-0.5% ±" in text                     # a win (less time) with its noise
    flat = " ".join(text.split())
    assert "the untuned build: the fastest" in flat and "0.5% ±0.5% faster: not beyond" in flat
    assert "torch/o3+ukernels (1t) build-failed: stage compile" in flat


def test_an_unknown_device_name_is_an_error_naming_the_registered_devices(home):
    from edgekit.config.devices import DeviceEntry, resolve_device, save_registry
    from edgekit.errors import ConfigError
    save_registry({"kitchen-pi": DeviceEntry(name="kitchen-pi", address="pi@192.0.2.7:22",
                                             identity="/k")})
    with pytest.raises(ConfigError) as err:
        resolve_device("lab-aarch64-1")
    assert err.value.exit_code == 2
    assert "unknown device 'lab-aarch64-1'; registered devices: kitchen-pi" in str(err.value)
    assert resolve_device("kitchen-pi")[0].host == "192.0.2.7"


@pytest.mark.parametrize("command", ["probe", "releases", "rollback", "provision"])
def test_an_unknown_device_name_is_the_only_line_not_after_a_connecting_step(home, monkeypatch,
                                                                            command):
    monkeypatch.setenv("EDGEKIT_PROGRESS", "lines")
    args = [command, "lab-aarch64-9"] + (["--app", "x"] if command in ("releases", "rollback")
                                         else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "unknown device 'lab-aarch64-9'" in result.output
    assert "connecting" not in result.output


def test_a_missing_identity_says_so_without_claiming_the_device_refused_it(home, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    said = invoke("probe", "pi@192.0.2.1")
    assert said.exit_code == 2 and "no identity to log in with" in said.output
    assert "refused" not in said.output and "nothing was sent" in said.output
    said = invoke("probe", "pi@192.0.2.1", "--identity", str(tmp_path / "gone"))
    assert said.exit_code == 2 and "identity file not found" in said.output


def test_results_name_a_device_by_its_registered_name_also_when_given_by_address(home):
    from edgekit.config.devices import DeviceEntry, device_label, save_registry
    save_registry({"lab-x86_64-1": DeviceEntry(name="lab-x86_64-1", identity="/k",
                                               address="root@127.0.0.7:2201")})
    assert device_label("lab-x86_64-1") == "lab-x86_64-1"
    assert device_label("root@127.0.0.7:2201") == "lab-x86_64-1"
    assert device_label("pi@192.0.2.9") == "pi@192.0.2.9"
    assert device_label("local:/tmp/dev") == "local:/tmp/dev"


def test_the_quantization_comparison_fits_80_columns_with_whole_numbers(narrow):
    from types import SimpleNamespace as NS
    acc = NS(outputs=[NS(min_cosine=0.999871, max_abs_error=0.0123, top1_agreement=0.985)])
    census = NS(integer=12, f16=0, f32=2, other=0, total=14)
    rows = [NS(mode="fp32", status="built", reason="", bundle=NS(path="build/x-fp32"),
               size=274_112_000, p50_ms=12.3456, measured_on="this machine", quantization=None),
            NS(mode="int8", status="built", reason="", bundle=NS(path="build/x-int8"),
               size=68_528_000, p50_ms=4.5678, measured_on="this machine",
               quantization=NS(accuracy=acc, contractions=census)),
            NS(mode="int8-weights", status="failed", reason="stage compile: no", bundle=None,
               size=0, p50_ms=None, measured_on="", quantization=None)]
    render.quantization_comparison(rows)
    text = narrow.getvalue()
    assert fits(text), text
    table = text.split("size and speed")[0]
    for figure in ("274,112,000", "68,528,000", "0.999871", "12i8", "2f32", "2.70×", "0.25×"):
        assert figure in table, table
    assert "…" not in table


def test_the_fleet_status_table_fits_80_columns_and_names_devices(narrow):
    from edgekit.models.fleet import FleetDeviceStatus, LastValidation
    ok = FleetDeviceStatus(device="kitchen-pi-livingroom", address="pi@192.0.2.17:22",
                           target="rpi4", reachable=True, current="3f9a0c1d2e4b5a69",
                           built_for="rpi4", runtime="iree 3.13.0",
                           last_validation=LastValidation(release="3f9a0c1d2e4b5a69", ok=True,
                                                          at="2026-11-30T21:00:07+00:00"))
    gone = FleetDeviceStatus(device="garage-pi", address="pi@192.0.2.18:22", target="rpi4",
                             error="DeviceUnreachable: connect: no answer within 10 s "
                                   "(timeouts.connect_s); is the address right?")
    render.fleet_status_table("kws-mlp", [ok, gone])
    text = narrow.getvalue()
    assert fits(text), text
    table = text.split("garage-pi (")[0]
    assert "3f9a0c1d" in table and "2026-11-30 21:00" in table and "iree 3.13.0" in table
    assert "192.0.2.17" not in table and "kitchen-pi-livi" in table   # names, folded
    assert "garage-pi (pi@192.0.2.18:22): DeviceUnreachable" in text


def test_progress_is_a_line_per_step_when_piped_and_never_0_of_none(monkeypatch):
    monkeypatch.delenv("EDGEKIT_PROGRESS", raising=False)     # the default: auto
    buffer = io.StringIO()
    monkeypatch.setattr(render, "err", Console(file=buffer, width=80, color_system=None))
    with render.steps("building…") as status:
        status.update("export…")
        status.update("export…")
        status.update("lower+compile…")
    assert buffer.getvalue().splitlines() == ["edgekit: building…", "edgekit: export…",
                                              "edgekit: lower+compile…"]
    from types import SimpleNamespace as NS
    assert render._Count().render(NS(total=None, completed=0)).plain == ""
    assert render._Count().render(NS(total=10, completed=3)).plain == "3/10"


def test_probe_of_an_emulated_aarch64_device_reports_its_hwcap_not_the_hosts_cpu(narrow):
    from edgekit.device.probe import parse_probe
    info = parse_probe("arch=aarch64\ncpu_model=AMD EPYC 7B13\ncpu_flags=fpu sse2 avx2 "
                       "sse4_2\nhwcap=ecfffffb\nhwcap2=0x7f877fff\ncores=2\n")
    assert info.cpu_flags == () and "emulated aarch64" in info.cpu_model
    assert info.has_cpu_feature("neon") is True and info.has_cpu_feature("sse4.2") is None
    render.probe_table("lab-aarch64-1", info)
    text = narrow.getvalue()
    assert fits(text), text
    assert "neon" in text and "from AT_HWCAP" in text and "avx2" not in text
    flat = " ".join(text.split())
    assert "emulated aarch64 (/proc/cpuinfo describes the host: AMD EPYC 7B13)" in flat


def test_a_missing_factory_file_is_the_same_config_error_as_a_missing_onnx_file(write_recipe):
    from edgekit.config.recipe import load_recipe
    from edgekit.errors import ConfigError
    for source, key in (("python: gone.py:make", "model.python"), ("onnx: gone.onnx",
                                                                     "model.onnx")):
        path = write_recipe(f"model:\n  {source}\ninputs:\n  - {{name: x, shape: [1]}}\n")
        with pytest.raises(ConfigError) as err:
            load_recipe(path)
        assert err.value.exit_code == 2 and err.value.key == key
        assert err.value.where == f"{path}:2" and "file not found" in err.value.what


def test_a_fleet_device_key_typo_lists_the_keys_a_device_takes(tmp_path):
    from edgekit.config.fleet import load_fleet
    from edgekit.errors import ConfigError
    path = tmp_path / "fleet.yaml"
    path.write_text("devices:\n  d1:\n    hots: 192.0.2.1\n    target: host\n")
    with pytest.raises(ConfigError) as err:
        load_fleet(path)
    assert err.value.where == f"{path}:3" and err.value.key == "devices.d1.hots"
    assert err.value.hint.startswith("did you mean 'host'? expected one of: host, port, user")


def test_validate_runs_without_local_and_still_accepts_it():
    from edgekit.cli.validate import validate
    local = next(p for p in validate.params if p.name == "local")
    assert not local.required and local.is_flag


def test_the_tuning_table_breaks_variant_names_between_their_parts_not_mid_word(narrow):
    from edgekit.cli.tune import tuning_table
    from edgekit.tune.tuner import CandidateResult
    record = tuning_record(n_ok=3)
    shared = CandidateResult(lowering="tosa", flag_set="im2col+data-tiling", flags=(),
                             threads=1, status="ok", reason="same module as tosa/data-tiling",
                             p50_ms=1.9, round_p50_ms=(1.9,) * 5, module_bytes=1_064_095)
    tuning_table(record.model_copy(update={"candidates": (*record.candidates, shared)}))
    text = narrow.getvalue()
    assert fits(text), text
    assert "tosa/im2col+" in text and "data-tiling  " in text   # a long result squeezes
    # each printed piece of a variant is whole parts of it ("linalg/", "convs-as-matmul+",
    # "data-tiling-0"), never "convs-as-matmu" + "l+data…"
    pieces = {line.split()[0] for line in text.splitlines()
              if line.strip().startswith(("linalg/", "convs-", "data-tiling-"))}
    assert pieces >= {"linalg/", "convs-as-matmul+", "data-tiling-0"}, text
    assert all(p.endswith(("/", "+")) or p.startswith("data-tiling-") for p in pieces), text


def test_fold_at_breaks_only_after_separators_and_keeps_short_names():
    assert render.fold_at("tosa/default", 22) == "tosa/default"
    assert render.fold_at("tosa/im2col+O3+data-tiling+ukernels", 22) == \
        "tosa/im2col+O3+\ndata-tiling+ukernels"
    assert render.fold_at("averyveryverylongnamewithoutseparators", 10) == \
        "averyveryverylongnamewithoutseparators"      # nothing to break at: rich folds it
