"""With `validation.reference: float64` the bundle records eager float32's own error against
the float64 goldens, and validation reads the module's error as a multiple of it (real
torch-mlir/IREE on a long float32 dot product)."""

import numpy as np

from edgekit import BuildOptions, build, validate_local

WIDE = '''
import torch
from torch import nn


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4)
        with torch.no_grad():
            self.fc.weight.uniform_(-300.0, 300.0)

    def forward(self, x):
        return self.fc(x)


def wide():
    torch.manual_seed(0)
    return Wide().eval(), (torch.rand(1, 4096) * 1000,)
'''


def test_validation_reports_the_modules_error_relative_to_eager_float32s(tmp_path,
                                                                         write_recipe):
    import torch
    (tmp_path / "wide.py").write_text(WIDE)
    recipe = write_recipe("name: wide64\nmodel: {python: wide.py:wide}\n"
                          "validation: {reference: float64, rtol: 0.001}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    (eager_error,) = bundle.manifest.float32_error
    # what eager float32 is off by, over the bundle's samples, recomputed here
    namespace: dict = {}
    exec(WIDE, namespace)
    model, _ = namespace["wide"]()
    m = bundle.manifest
    worst = 0.0
    for files in [m.golden_inputs, *(s.inputs for s in m.more_golden)]:
        x = torch.from_numpy(np.load(bundle.file(files[0])))
        with torch.no_grad():
            exact, narrow = model.double()(x.double()), model.float()(x)
        worst = max(worst, float((narrow.double() - exact).abs().max()))
    assert eager_error == worst and eager_error > 0
    report = validate_local(bundle.path)
    (out,) = report.outputs
    assert report.ok and out.float32_ratio == out.max_abs_error / eager_error
    assert 0 < out.float32_ratio < 100, out   # measured 7.2: IREE sums the 4096 in order
