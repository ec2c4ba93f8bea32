"""Hugging Face causal LMs (Llama, Qwen, Phi, GPT-2 … built by a recipe's factory): transformers
returns a `DynamicCache` beside the logits by default (`use_cache=True`), which torch.export
cannot put in a program's outputs. edgekit builds them without a cache, each call taking the
whole prompt, and says so; `model: {cache: none}` asks for that explicitly."""

from __future__ import annotations

from edgekit.config.recipe import Recipe
from edgekit.errors import ConfigError


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
    build); `cache: static` refused in one line, `cache:` on another model too."""
    asked = recipe.model.cache
    if not is_causal_lm(model):
        if asked:
            raise ConfigError(f"`cache: {asked}` is for a Hugging Face causal LM, and "
                              f"{type(model).__name__} is none", where=str(recipe.path),
                              key="model.cache", hint="leave `cache:` out")
        return model, ()
    if asked == "static":
        raise ConfigError("`cache: static` (a prefill and a decode module with a static KV "
                          "cache) is not built yet", where=str(recipe.path), key="model.cache",
                          hint="use `cache: none` (or leave it out): each call takes the whole "
                               "prompt and gives its logits")
    had = bool(model.config.use_cache)
    model.config.use_cache = False
    if asked == "none":
        return model, ("causal LM built without a KV cache, as the recipe asks (`cache: none`)",)
    return model, ((f"{type(model).__name__}: built without a KV cache (use_cache=False"
                    + (", where its config had True" if had else "") + "; torch.export cannot "
                    "return transformers' DynamicCache): each call takes the whole prompt and "
                    "gives its logits; `model: {cache: none}` in the recipe says so"),)
