"""A Llama-style causal LM from a transformers config, as a user's factory returns it (the
default `use_cache=True`): built without a KV cache, said in the build, matching eager on
held-out prompts for the host and for a Raspberry Pi 4 (under qemu); `cache: static` and
`cache:` on a model without one are one line each."""

import pytest

from edgekit import BuildOptions, build
from tests.corpus.harness import build_and_compare
from tests.corpus.models import CORPUS
from tests.integration.helpers import edgekit

LLAMA = next(e for e in CORPUS if e.name == "llama")


@pytest.mark.parametrize("target", ["host", "rpi4"])
def test_a_llama_decoder_builds_without_a_cache_and_matches_eager(target, tmp_path,
                                                                  arm64_userland):
    outcome = build_and_compare(LLAMA, target, tmp_path)
    assert outcome.scale > 0
    assert outcome.max_abs_error <= 1e-4 * max(1.0, outcome.scale), outcome


def test_the_build_says_it_chose_no_cache(tmp_path):
    recipe = tmp_path / "llama.yaml"
    recipe.write_text(f'name: llama\nmodel:\n  python: "{LLAMA.python}"\n')
    bundle = build(BuildOptions(recipe=recipe, target="host", out=tmp_path / "b")).bundle
    assert any("LlamaForCausalLM: built without a KV cache (use_cache=False, where its config "
               "had True" in n for n in bundle.manifest.model_notes), bundle.manifest.model_notes
    assert len(bundle.manifest.more_golden) == 2       # held-out prompts, against eager


def test_cache_static_and_cache_on_another_model_are_one_line(tmp_path):
    static = tmp_path / "s.yaml"
    static.write_text(f'model:\n  python: "{LLAMA.python}"\n  cache: static\n')
    proc = edgekit("build", "--recipe", str(static), "--target", "host", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "`cache: static` (a prefill and a decode module with a static KV cache) is not " \
           "built yet" in proc.stderr
    other = tmp_path / "o.yaml"
    vit = next(e for e in CORPUS if e.name == "vit")
    other.write_text(f'model:\n  python: "{vit.python}"\n  cache: none\n')
    proc = edgekit("build", "--recipe", str(other), "--target", "host", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "`cache: none` is for a Hugging Face causal LM" in proc.stderr
