#!/usr/bin/env python3
"""Small LLM decoders with a static KV cache (`model: {cache: static, max_cache_len: N}`): each
tiny-config causal LM from tests/corpus/models.py built for the host as one module with a
prefill (`main`) and a `decode` function, validated, then made to generate on held-out prompts
by itself (prefill, then decode fed its own token, position and cache) against transformers'
greedy `generate`. The corpus tier runs the Llama-style one (host and rpi4); this runs the
families beside it.

    python bench/llm_decoders.py [--models llama,qwen2,phi3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama,qwen2,phi3",
                        help="factories of tests/corpus/models.py")
    args = parser.parse_args()
    from edgekit import BuildOptions, build
    from edgekit.validate.local import validate_local
    from tests.corpus import models
    from tests.corpus.harness import HELD_OUT_SEEDS
    from tests.corpus.test_llm_decoder import (LLAMA, eager_generation, module_generation,
                                               static_recipe)
    print(f"{'model':8} {'build s':>8} {'validated':>9} {'same tokens':>11} "
          f"{'max |logit error| / scale':>26}")
    for name in args.models.split(","):
        factory = getattr(models, name)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            started = time.perf_counter()
            bundle = build(BuildOptions(
                recipe=static_recipe(folder, python=f"{models.__file__}:{name}"),
                target="host", out=folder / "b", use_cache=False)).bundle
            seconds = time.perf_counter() - started
            validated = validate_local(bundle.path).ok
            same, worst = 0, 0.0
            for seed in HELD_OUT_SEEDS:
                prompt = LLAMA.held_out(seed)[0]
                want_tokens, want_logits = eager_generation(prompt, factory)
                tokens, logits = module_generation(bundle, prompt.numpy())
                same += tokens.tolist() == want_tokens.tolist()
                for got, want in zip(logits, want_logits):
                    scale = max(1.0, float(np.abs(want).max()))
                    worst = max(worst, float(np.abs(got - want).max()) / scale)
        print(f"{name:8} {seconds:8.1f} {str(validated):>9} "
              f"{same:>5} of {len(HELD_OUT_SEEDS):<3} {worst:26.2e}")


if __name__ == "__main__":
    main()
