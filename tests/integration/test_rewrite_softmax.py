"""`--edgekit-softmax-by-columns` through the real pipeline: torch-mlir and IREE build the
rewritten tiny attention block, and it validates against the model as written."""

from tests.fixtures.tiny_attention import __file__ as TINY_ATTENTION


def test_the_softmax_rewrite_builds_validates_and_is_recorded(write_recipe):
    from edgekit import BuildOptions, build, validate_local
    recipe = write_recipe(f'name: attention\nmodel:\n  python: "{TINY_ATTENTION}:tiny_attention"\n'
                          "compile: {flags: [--edgekit-softmax-by-columns=16, "
                          "--iree-opt-data-tiling]}\n")
    bundle = build(BuildOptions(recipe=recipe, target="host")).bundle
    assert "2 of 3 softmax by columns" in bundle.manifest.lowering.note
    assert not any(f.startswith("--edgekit-") for f in bundle.manifest.compile_flags)
    assert validate_local(bundle.path).ok  # against the model as written
