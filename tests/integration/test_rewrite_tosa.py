"""The TOSA legalisation (pipeline/rewrite_tosa.py) through the real pipeline: a tiny model
with float64 constants, an `arange` mask, attention and a 32-group convolution builds with
`lowering: tosa` (each of those alone made torch-mlir's TOSA one that IREE refuses), the build
says what it changed (the lowering note `edgekit build` prints), and the module matches eager
on an input the build never saw."""

import numpy as np
import torch

from tests.corpus.harness import run_module
from tests.fixtures.tosa_legalisation import __file__ as FIXTURE
from tests.fixtures.tosa_legalisation import image, legalisation


def test_a_model_with_f64_constants_masks_and_wide_groups_builds_through_tosa(write_recipe):
    from edgekit import BuildOptions, build, validate_local
    recipe = write_recipe(f'name: legalised\nmodel:\n  python: "{FIXTURE}:legalisation"\n'
                          "lowering: tosa\n")
    bundle = build(BuildOptions(recipe=recipe, target="host", use_cache=False)).bundle
    manifest = bundle.manifest
    assert manifest.lowering.used == "tosa"
    note = manifest.lowering.note
    for said in ("2 float64 constant(s) (scale, offset) stored as float32",
                 "folded into constants", "float-scalar comparison(s) made in the tensor's "
                 "dtype", "1 convolution(s) of more than 31 groups"):
        assert said in note, note
    assert validate_local(bundle.path).ok
    model, _ = legalisation()
    x = image(7)
    with torch.no_grad():
        expected = model(x).numpy()
    (got,) = run_module(bundle.module, manifest.arch, manifest.runtime_driver,
                        manifest.entry_function, [x.numpy()], 1)
    assert np.max(np.abs(got - expected)) <= 1e-4 * max(1.0, float(np.max(np.abs(expected))))
