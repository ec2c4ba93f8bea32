"""Hugging Face causal LMs (Llama, Qwen, Phi, GPT-2 … built by a recipe's factory): transformers
returns a `DynamicCache` beside the logits by default (`use_cache=True`), which torch.export
cannot put in a program's outputs. edgekit builds them without a cache, each call taking the
whole prompt, and says so; `model: {cache: none}` asks for that explicitly.

`model: {cache: static, max_cache_len: M}` builds generation instead: one module with two
functions, `main` (prefill: the prompt's token ids [1, P] → its logits and the KV cache
filled at positions 0..P-1) and `decode` (one token [1, 1], its position [1], the cache → its
logits and the cache with that position written). The cache is two explicit tensors, keys and
values, [layers, 1, kv heads, M, head dim], passed in and returned: fixed shapes, written with
a one-hot `where` (IREE 3.13's CPU codegen refuses the scatter `index_copy` becomes: "write
affecting operations on global resources are restricted to workgroup distributed contexts"),
and an explicit additive mask (key position <= query position), so stale cache rows never
count. Validation runs every prompt through prefill and DECODE_STEPS greedy decode steps."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch

from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError, ModelLoadError
from edgekit.models.bundle import TensorSig

DECODE_STEPS = 4        # greedy decode steps validated after each prompt's prefill
DECODE = "decode"       # the second function's name in the module
DECODE_INPUTS = ("token", "position", "keys", "values")
OUTPUTS = ("logits", "keys", "values")     # both functions' (tolerances go by these names)


def is_causal_lm(model) -> bool:
    """A transformers model whose forward makes a KV cache: its config has `use_cache`, and it
    is a decoder (a `…ForCausalLM`, or a config that says `is_decoder`)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "use_cache"):
        return False
    return type(model).__name__.endswith("ForCausalLM") or bool(
        getattr(config, "is_decoder", False))


def with_cache_choice(recipe: Recipe, model) -> tuple[object, tuple[str, ...]]:
    """(the model as it is built, notes): a causal LM set to `use_cache=False` (said in the
    build), or wrapped as a prefill/decode pair for `cache: static`; `cache:` on another model
    is one line."""
    asked = recipe.model.cache
    if not is_causal_lm(model):
        if asked:
            raise ConfigError(f"`cache: {asked}` is for a Hugging Face causal LM, and "
                              f"{type(model).__name__} is none", where=str(recipe.path),
                              key="model.cache", hint="leave `cache:` out")
        return model, ()
    if asked == "static":
        return _static_pair(recipe, model)
    had = bool(model.config.use_cache)
    model.config.use_cache = False
    if asked == "none":
        return model, ("causal LM built without a KV cache, as the recipe asks (`cache: none`)",)
    return model, ((f"{type(model).__name__}: built without a KV cache (use_cache=False"
                    + (", where its config had True" if had else "") + "; torch.export cannot "
                    "return transformers' DynamicCache): each call takes the whole prompt and "
                    "gives its logits; `model: {cache: none}` in the recipe says so; "
                    "`cache: static` builds a prefill and a decode function instead"),)


def _static_pair(recipe: Recipe, model) -> tuple["DecoderPair", tuple[str, ...]]:
    where = str(recipe.path)
    for key, given in (("quantize", recipe.quantize is not None),
                       ("validation.reference", recipe.validation.reference == "float64")):
        if given:
            raise ConfigError(f"`cache: static` is not built with `{key}:` yet (its decode "
                              "function would not get it)", where=where, key=key,
                              hint=f"leave `{key}:` out, or use `cache: none`")
    length = recipe.model.max_cache_len or 0
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and length > limit:
        raise ConfigError(f"`max_cache_len: {length}` is beyond the model's "
                          f"max_position_embeddings ({limit})", where=where,
                          key="model.max_cache_len", hint=f"at most {limit}")
    model.config.use_cache = True    # the pair passes its own cache; never a DynamicCache
    return DecoderPair(model, length), (
        f"{type(model).__name__}: built with a static KV cache (`cache: static`, "
        f"max_cache_len {length}): function `main` is the prefill (token ids → logits, keys, "
        f"values), `{DECODE}` one step (token [1, 1], position [1], keys, values → logits, "
        f"keys, values); each prompt validated through prefill and {DECODE_STEPS} greedy "
        "decode steps",)


class _ExplicitCache:
    """The KV cache as tensors the graph takes and returns (no state between calls): what a
    transformers attention layer's `past_key_values.update(k, v, layer)` meets."""

    def __init__(self, keys: list, values: list, position: torch.Tensor | None, length: int):
        self.keys, self.values = keys, values
        self.position, self.length = position, length    # position None: prefill from 0

    def update(self, key, value, layer_idx, *args, **kwargs):
        self.keys[layer_idx] = self._write(self.keys[layer_idx], key)
        self.values[layer_idx] = self._write(self.values[layer_idx], value)
        return self.keys[layer_idx], self.values[layer_idx]

    def _write(self, cache, new):
        if self.position is None:      # the prompt fills rows 0..P-1; the rest stays zero
            return torch.nn.functional.pad(new, (0, 0, 0, self.length - new.shape[2]))
        hit = (torch.arange(self.length) == self.position).view(1, 1, self.length, 1)
        return torch.where(hit, new, cache)


class _Step(torch.nn.Module):
    def __init__(self, lm, length: int):
        super().__init__()
        self.lm, self.length = lm, length

    def step(self, ids, first: torch.Tensor, keys: list, values: list, prefill: bool):
        positions = first + torch.arange(ids.shape[1], dtype=torch.int64)
        cache = _ExplicitCache(keys, values, None if prefill else first, self.length)
        seen = torch.arange(self.length, dtype=torch.int64)[None, :] <= positions[:, None]
        mask = torch.where(seen, 0.0, torch.finfo(torch.float32).min)[None, None]
        out = self.lm(input_ids=ids, position_ids=positions[None], attention_mask=mask,
                      past_key_values=cache, use_cache=True)
        return out.logits, torch.stack(cache.keys), torch.stack(cache.values)


class _Decode(_Step):
    def forward(self, token, position, keys, values):
        return self.step(token, position[0], list(keys.unbind(0)), list(values.unbind(0)),
                         prefill=False)


class DecoderPair(_Step):
    """A causal LM as a prefill (this module's forward) and a decode step (`.decode`)."""

    def __init__(self, lm, length: int):
        super().__init__(lm, length)
        self.decode = _Decode(lm, length)

    def forward(self, ids):
        layers = self.lm.config.num_hidden_layers
        return self.step(ids, torch.zeros((), dtype=torch.int64), [None] * layers,
                         [None] * layers, prefill=True)


def with_decode(exported, pair: DecoderPair, where: str):
    """`exported` (the prefill, exported with its goldens) with the decode function: each
    prompt's DECODE_STEPS greedy steps from the prefill's cache as its validation samples,
    checked first against the model's own forward without a cache (same greedy tokens, logits
    within float32 rounding), then exported from the first step."""
    from edgekit.pipeline.frontends.torch import _torch_quiet, export_failure, program_digest
    prompts = [(exported.samples, exported.golden),
               *zip(exported.more_samples, exported.more_golden)]
    length = int(prompts[0][0][0].shape[1])
    if length + DECODE_STEPS > pair.length:
        raise ConfigError(f"`max_cache_len: {pair.length}` leaves no room for validation: the "
                          f"prompt takes {length} positions and {DECODE_STEPS} decode steps "
                          "follow it", where=where, key="model.max_cache_len",
                          hint=f"at least {length + DECODE_STEPS}")
    samples, golden = [], []
    for (ids,), first in prompts:
        steps = _greedy_steps(pair, ids, first)
        _check_against_forward(pair.lm, ids, [first[0], *(g[0] for _, g in steps)], where)
        samples += [s for s, _ in steps]
        golden += [g for _, g in steps]
    args = tuple(torch.from_numpy(np.array(a)) for a in samples[0])
    try:
        with _torch_quiet():
            program = torch.export.export(pair.decode, args)
    except Exception as exc:  # torch.export raises many kinds; all mean "cannot export"
        raise export_failure(exc) from None
    function = _function(program, samples, golden)
    digest = hashlib.sha256(f"{exported.digest} {DECODE} {program_digest(program)} "
                            f"{pair.length}".encode()).hexdigest()
    outputs = tuple(o.model_copy(update={"name": n}) for o, n in zip(exported.outputs, OUTPUTS))
    return dataclasses.replace(exported, digest=digest, outputs=outputs, functions=(function,))


def _function(program, samples, golden):
    from edgekit.pipeline.export import ExportedFunction
    return ExportedFunction(
        name=DECODE, program=program,
        inputs=tuple(TensorSig(name=n, shape=a.shape, dtype=str(a.dtype))
                     for n, a in zip(DECODE_INPUTS, samples[0])),
        outputs=tuple(TensorSig(name=n, shape=g.shape, dtype=str(g.dtype))
                      for n, g in zip(OUTPUTS, golden[0])),
        samples=tuple(samples), golden=tuple(golden),
        role="one greedy step: token [1, 1] at `position` [1] with the cache from `main` (or "
             "the previous step) → its logits [1, 1, vocab] and the cache with that position "
             "written")


def _greedy_steps(pair: DecoderPair, ids: np.ndarray, first: tuple[np.ndarray, ...]):
    """[(decode inputs, eager decode outputs)] for DECODE_STEPS greedy steps after `ids`."""
    logits, keys, values = first
    steps = []
    with torch.no_grad():
        for k in range(DECODE_STEPS):
            token = np.array(logits[:, -1:].argmax(-1), dtype=np.int64)
            inputs = (token, np.array([ids.shape[1] + k], dtype=np.int64), keys, values)
            out = pair.decode(*(torch.from_numpy(np.array(a)) for a in inputs))
            outputs = tuple(t.detach().contiguous().numpy() for t in out)
            steps.append((inputs, outputs))
            logits, keys, values = outputs
    return steps


def _check_against_forward(lm, ids: np.ndarray, logits: list[np.ndarray], where: str) -> None:
    """The pair's logits (prefill, then each step) against the model's own forward over the
    whole sequence without a cache: a model whose attention ignores the pair's cache or mask
    is refused here, not shipped."""
    sequence = torch.from_numpy(np.array(ids))
    for k, got in enumerate(logits):
        if k:
            sequence = torch.cat([sequence, torch.from_numpy(logits[k - 1][:, -1:].argmax(-1))], 1)
        with torch.no_grad():
            full = lm(input_ids=sequence, use_cache=False).logits.numpy()
        want = full if k == 0 else full[:, -1:]
        scale = max(1.0, float(np.abs(want).max()))
        off = float(np.abs(want - got).max())
        if off > 1e-4 * scale or not np.array_equal(want.argmax(-1), got.argmax(-1)):
            raise ModelLoadError(
                f"{type(lm).__name__} with a static KV cache does not reproduce its own forward "
                f"({'prefill' if k == 0 else f'decode step {k}'}: logits off by {off:.3g}, "
                f"largest {scale:.3g})", where=where,
                hint="its attention does not use a passed cache and 4-D mask the way "
                     "Llama/Qwen/Phi do; use `cache: none`")
