"""One `samples:` file is one input set: edgekit draws more like it, so that an output the same
for every input (a dead network) is refused as it is without samples (real torch-mlir/IREE)."""

import numpy as np
import pytest

from edgekit import BuildOptions, build
from tests.fixtures.user_models import DEAD_RELU as DEAD_RELU_SOURCE
from tests.integration.helpers import edgekit

DEAD_RELU = DEAD_RELU_SOURCE + '''

class Mask(nn.Module):
    def forward(self, x, mask):
        return x * mask.to(x.dtype) + 1.0


def masked():
    return Mask().eval(), (torch.rand(2, 3), torch.ones(2, 3, dtype=torch.bool))
'''


@pytest.fixture()
def models(tmp_path):
    (tmp_path / "dead.py").write_text(DEAD_RELU)
    np.savez(tmp_path / "one.npz", x=np.random.default_rng(1).random((1, 12), np.float32))
    return tmp_path


def test_a_dead_relu_classifier_with_one_samples_file_is_refused(models, write_recipe):
    recipe = write_recipe("name: dead-relu\nmodel: {python: dead.py:dead_relu}\n"
                          "inputs: [{name: x, shape: [1, 12]}]\nsamples: one.npz\n")
    proc = edgekit("build", "--recipe", str(recipe), "--target", "host", cwd=models)
    assert proc.returncode == 8, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "golden output 'output_0' cannot tell a right module from a wrong one: it is the " \
           "same for all 3 validation samples" in proc.stderr
    assert "accept_uninformative: [output_0]" in proc.stderr


def test_with_one_samples_file_the_build_says_it_drew_more_and_names_a_constant_mask(
        models, write_recipe):
    np.savez(models / "m.npz", x=np.random.default_rng(2).random((2, 3), np.float32),
             mask=np.ones((2, 3), bool))
    recipe = write_recipe("name: masked\nmodel: {python: dead.py:masked}\n"
                          "inputs: [{name: x, shape: [2, 3]}, "
                          "{name: mask, shape: [2, 3], dtype: bool}]\nsamples: m.npz\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    notes = bundle.manifest.model_notes
    assert any("2 more drawn like it" in n for n in notes), notes
    assert any("input 'mask' is True everywhere in every validation sample" in n
               for n in notes), notes
    assert len(bundle.manifest.more_golden) == 2


def test_accepting_it_knowingly_builds(models, write_recipe):
    recipe = write_recipe("name: dead-relu-ok\nmodel: {python: dead.py:dead_relu}\n"
                          "inputs: [{name: x, shape: [1, 12]}]\nsamples: one.npz\n"
                          "validation: {accept_uninformative: true}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    assert len(bundle.manifest.more_golden) == 2


WIDE_SUM = '''
import torch
from torch import nn


class WideSum(nn.Module):
    """Long float32 dot products of large values: eager float32 is visibly off from float64."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4)
        with torch.no_grad():
            self.fc.weight.uniform_(-300.0, 300.0)

    def forward(self, x):
        return self.fc(x)


def wide_sum():
    torch.manual_seed(0)
    return WideSum().eval(), (torch.rand(1, 4096) * 1000,)
'''


def test_a_float64_reference_gives_the_goldens_and_says_how_far_eager_float32_is(
        tmp_path, write_recipe):
    import torch

    from edgekit import validate_local
    (tmp_path / "wide.py").write_text(WIDE_SUM)
    recipe = write_recipe("name: wide\nmodel: {python: wide.py:wide_sum}\n"
                          "validation: {reference: float64, rtol: 0.001}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    (note,) = [n for n in bundle.manifest.model_notes if "eager float64" in n]
    assert "eager float32 is off from them by" in note
    golden = np.load(bundle.file(bundle.manifest.golden_outputs[0]))
    x = np.load(bundle.file(bundle.manifest.golden_inputs[0]))
    import importlib.util
    spec = importlib.util.spec_from_file_location("wide", tmp_path / "wide.py")
    wide = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wide)
    model, _ = wide.wide_sum()
    with torch.no_grad():
        exact = model.double()(torch.from_numpy(x).double()).numpy()
    assert golden.dtype == np.float32
    np.testing.assert_array_equal(golden, exact.astype(np.float32))
    # eager float32's own error, per output over every validation sample, is kept; validation
    # reads the module's as a multiple of it
    m = bundle.manifest
    worst = 0.0
    for files in [m.golden_inputs, *(s.inputs for s in m.more_golden)]:
        x = torch.from_numpy(np.load(bundle.file(files[0])))
        with torch.no_grad():
            off = model.float()(x).double() - model.double()(x.double())
        worst = max(worst, float(off.abs().max()))
    assert m.float32_error == (worst,) and worst > 0
    report = validate_local(bundle.path)
    (out,) = report.outputs
    assert report.ok and out.float32_ratio == out.max_abs_error / worst
    assert 0 < out.float32_ratio < 100, out  # 7.2 measured: IREE sums the 4096 in order
