"""A Llama-style causal LM from a transformers config, as a user's factory returns it (the
default `use_cache=True`): built without a KV cache, said in the build, matching eager on
held-out prompts for the host and for a Raspberry Pi 4 (under qemu); with `cache: static`, one
module with a prefill (`main`) and a `decode` function that generates, step by step from its own
outputs, the tokens transformers' greedy `generate` gives on held-out prompts. `cache:` errors
are one line each. Qwen2- and Phi-3-style decoders: bench/llm_decoders.py."""

import re

import numpy as np
import pytest
import torch

from edgekit import BuildOptions, build
from edgekit.errors import ConfigError
from edgekit.device.deploy import deploy_bundle
from edgekit.transport.local import LocalTransport
from edgekit.validate.local import validate_local
from tests.corpus import models
from tests.corpus.harness import HELD_OUT_SEEDS, build_and_compare, run_module
from tests.corpus.models import CORPUS
from tests.integration.helpers import edgekit

LLAMA = next(e for e in CORPUS if e.name == "llama")
CACHE_LEN = 24          # the prompt (16 tokens) and NEW tokens fit
NEW = 6                 # tokens generated per held-out prompt


@pytest.mark.parametrize("target", ["host", "rpi4"])
def test_a_llama_decoder_builds_without_a_cache_and_matches_eager(target, tmp_path,
                                                                  userland_for):
    userland_for(target)
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


def static_recipe(tmp_path, length: int = CACHE_LEN, python: str = LLAMA.python):
    recipe = tmp_path / "llm-static.yaml"
    recipe.write_text(f'name: llm-gen\nmodel:\n  python: "{python}"\n'
                      f'  cache: static\n  max_cache_len: {length}\n')
    return recipe


@pytest.fixture(scope="module")
def static_host(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama-static")
    return build(BuildOptions(recipe=static_recipe(folder), target="host",
                              out=folder / "b", use_cache=False)).bundle


def eager_generation(prompt: torch.Tensor, factory=models.llama):
    """transformers' own greedy generation (its DynamicCache): tokens and each step's logits."""
    model = factory()[0]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=NEW, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.sequences[0, prompt.shape[1]:].numpy(), [s.numpy() for s in out.logits]


def module_generation(bundle, prompt: np.ndarray):
    """Greedy generation by the module alone: `main` on the prompt, then `decode` fed its own
    token, position and cache back NEW - 1 times."""
    m = bundle.manifest
    logits, keys, values = run_module(bundle.module, m.arch, m.runtime_driver, "main",
                                      [prompt], 3)
    tokens, steps = [], [logits[:, -1]]
    for k in range(NEW - 1):
        tokens.append(int(steps[-1].argmax()))
        token = np.array([[tokens[-1]]], dtype=np.int64)
        position = np.array([prompt.shape[1] + k], dtype=np.int64)
        logits, keys, values = run_module(bundle.module, m.arch, m.runtime_driver, "decode",
                                          [token, position, keys, values], 3)
        steps.append(logits[:, -1])
    tokens.append(int(steps[-1].argmax()))
    return np.array(tokens), steps


def assert_generates_like_eager(bundle, factory=models.llama) -> None:
    for seed in HELD_OUT_SEEDS:
        prompt = LLAMA.held_out(seed)[0]
        want_tokens, want_logits = eager_generation(prompt, factory)
        tokens, logits = module_generation(bundle, prompt.numpy())
        assert tokens.tolist() == want_tokens.tolist(), (seed, tokens, want_tokens)
        for step, (got, want) in enumerate(zip(logits, want_logits)):
            scale = max(1.0, float(np.abs(want).max()))
            assert np.abs(got - want).max() <= 1e-4 * scale, (seed, step)


def test_a_static_cache_build_is_a_prefill_and_a_decode_function_in_one_module(static_host):
    m = static_host.manifest
    assert m.entry_function == "main" and [f.name for f in m.functions] == ["decode"]
    assert [s.shape for s in m.functions[0].inputs] == [(1, 1), (1,), (2, 1, 2, CACHE_LEN, 16),
                                                        (2, 1, 2, CACHE_LEN, 16)]
    assert m.inputs[0].shape == (1, 16) and m.outputs[1].shape == (2, 1, 2, CACHE_LEN, 16)
    assert [o.name for o in m.outputs] == [o.name for o in m.functions[0].outputs] == [
        "logits", "keys", "values"]
    # three prompts (the golden one, two drawn), each followed by four greedy decode steps
    assert [s.function for s in m.more_golden] == ["", ""] + ["decode"] * 12
    assert any("built with a static KV cache (`cache: static`, max_cache_len 24)" in n
               for n in m.model_notes), m.model_notes


def test_the_static_cache_module_generates_what_transformers_generates(static_host):
    assert_generates_like_eager(static_host)


def test_the_static_cache_bundle_validates_both_functions_here_and_on_a_device(static_host,
                                                                               tmp_path):
    assert validate_local(static_host.path).ok
    device = tmp_path / "device"
    device.mkdir()
    result = deploy_bundle(LocalTransport(device), static_host)   # the device's run.sh
    assert result.activated and result.report.ok, result.report
    assert result.report.samples == 15, result.report


def test_an_rpi4_static_cache_module_generates_what_transformers_generates(tmp_path,
                                                                           arm64_userland):
    bundle = build(BuildOptions(recipe=static_recipe(tmp_path), target="rpi4",
                                out=tmp_path / "b", use_cache=False)).bundle
    assert bundle.manifest.arch == "aarch64" and bundle.manifest.functions[0].name == "decode"
    assert_generates_like_eager(bundle)          # the aarch64 module under qemu


def test_cache_errors_are_one_line(tmp_path):
    cases = {
        "  cache: static\n": "`cache: static` needs `max_cache_len: N`",
        "  cache: static\n  max_cache_len: 18\n": "`max_cache_len: 18` leaves no room for "
                                                  "validation: the prompt takes 16 positions",
        "  cache: static\n  max_cache_len: 100\n": "`max_cache_len: 100` is beyond the model's "
                                                   "max_position_embeddings (64)",
    }
    for k, (lines, said) in enumerate(cases.items()):
        recipe = tmp_path / f"s{k}.yaml"
        recipe.write_text(f'model:\n  python: "{LLAMA.python}"\n{lines}')
        with pytest.raises(ConfigError, match=re.escape(said)):
            build(BuildOptions(recipe=recipe, target="host", out=tmp_path / f"b{k}"))
    # on the command line: one line, exit 2, no traceback
    proc = edgekit("build", "--recipe", str(tmp_path / "s1.yaml"), "--target", "host",
                   cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert cases["  cache: static\n  max_cache_len: 18\n"] in proc.stderr
    other = tmp_path / "o.yaml"
    vit = next(e for e in CORPUS if e.name == "vit")
    other.write_text(f'model:\n  python: "{vit.python}"\n  cache: none\n')
    proc = edgekit("build", "--recipe", str(other), "--target", "host", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "`cache: none` is for a Hugging Face causal LM" in proc.stderr
