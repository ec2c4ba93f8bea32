"""`validation.dataset`: a labelled set carried by the bundle (golden/ds-*.npy, verified with
the release) runs on the device before activation; its score is compared with the reference the
bundle records, and a drop beyond max_drop is refused in one line (exit 8) — the live release
stays. Labels here are the host's own arg-max over the same module (reference 1.0), so the
device must reproduce them; a copy whose labels are shuffled must be refused."""

import numpy as np
import pytest

from edgekit.config.recipe import DatasetGate
from edgekit.device.deploy import deploy_bundle
from edgekit.errors import ValidationFailed
from edgekit.models.bundle import load_bundle, write_manifest
from edgekit.pipeline.dataset import with_dataset
from edgekit.toolchain.iree import run_module
from edgekit.toolchain.signing import sign_bundle
from edgekit.validate.dataset import score
from edgekit.models import events as ev
from tests.local.conftest import current_of, device_journal
from edgekit.config.fleet import load_fleet
from edgekit.fleet.rollout import rollout_result as fleet_result
from edgekit.fleet.status import fleet_status
from edgekit.report.fleet_html import write_fleet_report
from tests.local.conftest import APP
from tests.local.test_fleet import fleet_file, roll, root

pytestmark = pytest.mark.local

COUNT = 70          # two batches of runs.sh (64 + 6)


def host_outputs(bundle, samples, scratch):
    m = bundle.manifest
    outs = []
    for i, (x,) in enumerate(samples):
        np.save(scratch / f"in{i}.npy", x)
        run_module(bundle.file("module.vmfb"), m.runtime_driver, m.entry_function,
                   [scratch / f"in{i}.npy"], [scratch / f"out{i}.npy"])
        outs.append((np.load(scratch / f"out{i}.npy"),))
    return outs


@pytest.fixture(scope="module")
def labelled(builds, tmp_path_factory):
    """(samples, host outputs) of the kws bundle on COUNT random inputs."""
    bundle = load_bundle(builds["v2"])
    rng = np.random.default_rng(7)
    samples = [(rng.standard_normal((1, 49, 10)).astype(np.float32),) for _ in range(COUNT)]
    return samples, host_outputs(bundle, samples, tmp_path_factory.mktemp("host"))


def gated(bundle, bundle_copy, samples, labels, reference, metric="top1", everywhere=False):
    def attach(directory):
        manifest = with_dataset(directory, bundle.manifest,
                                DatasetGate(samples="x.npz", labels="y.npy", metric=metric,
                                            max_drop=0.01, everywhere=everywhere),
                                samples, labels, reference)
        write_manifest(directory, manifest)
        sign_bundle(directory)
    return bundle_copy(bundle, attach)


def test_the_device_scores_the_set_as_the_host_did_and_goes_live(make_device, v2,
                                                                  bundle_copy, labelled):
    samples, outs = labelled
    labels = np.array([int(np.argmax(o[0])) for o in outs])
    assert score("top1", outs, labels) == 1.0
    result = deploy_bundle(make_device(), gated(v2, bundle_copy, samples, labels, 1.0))
    assert result.activated
    assert result.accuracy["dataset"] == {"metric": "top1", "reference": "fp32",
                                          "reference_score": 1.0, "measured": 1.0,
                                          "drop": 0.0, "samples": COUNT}


def test_a_score_below_the_reference_is_refused_in_one_line(make_device, v1, v2,
                                                           bundle_copy, labelled):
    samples, outs = labelled
    labels = np.array([(int(np.argmax(o[0])) + 1) % 12 for o in outs])   # all wrong
    device = make_device()
    deploy_bundle(device, v1)
    live = current_of(device.root)
    with pytest.raises(ValidationFailed) as err:
        deploy_bundle(device, gated(v2, bundle_copy, samples, labels, 0.97))
    assert str(err.value).splitlines()[0].startswith(
        "dataset gate: top1 reference 0.9700, measured 0.0000, drop 0.9700 > max_drop 0.01 "
        f"({COUNT} samples on local:")
    assert err.value.exit_code == 8
    assert current_of(device.root) == live
    assert device_journal(device.root)[-1][0] == "rejected"


def test_mse_against_the_hosts_outputs_is_zero_on_the_device(make_device, v2, bundle_copy,
                                                             labelled):
    samples, outs = labelled
    targets = np.stack([o[0] for o in outs])
    result = deploy_bundle(make_device(), gated(v2, bundle_copy, samples[:5], targets[:5],
                                                0.0, metric="mse"))
    assert result.accuracy["dataset"]["measured"] < 1e-8


@pytest.mark.parametrize("everywhere", [False, True])
def test_a_fleet_scores_the_set_on_its_canary_wave_only_unless_everywhere(
        tmp_path, v2, bundle_copy, labelled, everywhere):
    samples, outs = labelled
    labels = np.array([int(np.argmax(o[0])) for o in outs[:8]])
    bundle = gated(v2, bundle_copy, samples[:8], labels, 1.0, everywhere=everywhere)
    fleet = fleet_file(tmp_path, 3, rollout="{canary: 1, waves: [100%]}")
    seen = []
    result = roll(fleet, bundle, on_event=seen.append)
    assert result.status == "completed"
    done = {e.device: e.dataset for e in seen if isinstance(e, ev.DeviceDone)}
    assert done["d1"]["measured"] == 1.0 and done["d1"]["samples"] == 8
    assert (done["d2"] is not None, done["d3"] is not None) == (everywhere, everywhere)
    rows = {r.device: r.last_validation for r in fleet_status(load_fleet(fleet), APP)}
    assert rows["d1"].dataset == "top1 1.0000 (ref 1.0000)"
    assert (rows["d3"].dataset is not None) == everywhere
    # the rollout's result and HTML report: the score per device and per release
    scores = {d.device: d.dataset and str(d.dataset) for d in result.devices}
    gated_ones = 3 if everywhere else 1
    assert scores == {"d1": "top1 1.0000 (ref 1.0000)",
                      **{d: scores["d1"] if everywhere else None for d in ("d2", "d3")}}
    html = write_fleet_report(fleet_result(result.id), tmp_path / "fleet.html").read_text()
    assert html.count('<td class="score">top1 1.0000 (1.0000)</td>') == gated_ones
    assert f'<td>{result.releases["host"]}</td><td class="score">top1 1.0000 (ref 1.0000) ' \
        f'on {gated_ones} device{"s" if everywhere else ""}</td>' in html


def test_fleet_status_leaves_out_a_score_the_device_wrote_wrong(tmp_path, v2, bundle_copy,
                                                                labelled):
    samples, outs = labelled
    labels = np.array([int(np.argmax(o[0])) for o in outs[:4]])
    fleet = fleet_file(tmp_path, 1)
    assert roll(fleet, gated(v2, bundle_copy, samples[:4], labels, 1.0)).status == "completed"
    journal = root(tmp_path, "d1") / ".edgekit" / "apps" / APP / "journal.jsonl"
    text = journal.read_text().replace('"metric": "top1"', '"metric": "top1[red]x"')
    journal.write_text(text)
    (row,) = fleet_status(load_fleet(fleet), APP)
    assert row.last_validation.ok and row.last_validation.dataset is None
