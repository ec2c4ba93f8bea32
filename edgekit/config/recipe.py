"""Recipe YAML: which model, what its inputs look like, how to lower, compile and validate it.

Relative paths in a recipe are relative to the recipe file. `edgekit schema recipe` prints the
JSON Schema of :class:`Recipe` for editors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pydantic

from edgekit.config.edgekit_flags import parse_edgekit_flags
from edgekit.config.schema_base import Frozen
from edgekit.config.timeouts import Timeouts
from edgekit.config.yamlsrc import load_yaml, validate
from edgekit.errors import ConfigError

# Every tensor element type IREE computes that a .npy file can hold one element per entry
# (numpy's own, plus ml_dtypes' bfloat16 and float8 kinds: onnx uses the same names). 4-bit and
# smaller types are absent: IREE packs them several to a byte, a .npy holds one per byte.
DType = Literal["float32", "float16", "float64", "bfloat16",
                "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool"]
LoweringChoice = Literal["auto", "tosa", "linalg", "torch"]


class ModelSource(Frozen):
    """Exactly one of `python` (module:factory), `exported` (.pt2 from torch.export.save) or
    `onnx` (.onnx; external data only from the model's own directory)."""

    python: str | None = pydantic.Field(
        default=None,
        description="'package.module:factory' or 'file.py:factory' (relative to the recipe); the "
                    "factory returns an nn.Module or (nn.Module, example_inputs)")
    exported: str | None = pydantic.Field(default=None, description="path to a .pt2 file")
    # not part of what a build makes (excluded from dumps, so from cache keys and release ids)
    trust_pickle: bool = pydantic.Field(
        default=False, exclude=True,
        description="load the `exported` .pt2 although torch.export.load unpickles it (which "
                    "can run any code the file holds): only for files you made or trust; "
                    "also `--trust-pickle`")
    onnx: str | None = pydantic.Field(default=None, description="path to an .onnx file")
    # after the sources: the first string of a dump is the model file (source_key.py)
    cache: Literal["none", "static"] | None = pydantic.Field(
        default=None,
        description="a Hugging Face causal LM's KV cache: `none` (each call takes the whole "
                    "prompt; what edgekit chooses when not set) or `static` (generation: "
                    "function `main` prefills the prompt into a fixed-size cache, `decode` "
                    "takes one token; needs `max_cache_len`)")
    max_cache_len: int | None = pydantic.Field(
        default=None, ge=2, le=1 << 20,
        description="`cache: static`: the positions the KV cache holds (prompt and "
                    "generated tokens)")

    @pydantic.model_validator(mode="after")
    def _exactly_one(self) -> "ModelSource":
        given = [k for k in ("python", "exported", "onnx") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of `python: module:factory`, `exported: file.pt2` "
                             "or `onnx: model.onnx`")
        if self.cache and not self.python:
            raise ValueError("`cache` is for a `python: module:factory` model (a Hugging Face "
                             "causal LM)")
        if (self.cache == "static") != (self.max_cache_len is not None):
            raise ValueError("`cache: static` needs `max_cache_len: N` (the positions its KV "
                             "cache holds), and `max_cache_len` is for `cache: static` only")
        if self.trust_pickle and not self.exported:
            raise ValueError("`trust_pickle` is for an `exported: file.pt2` model")
        if self.python and ":" not in self.python:
            raise ValueError("`python` must look like 'package.module:factory' or "
                             "'file.py:factory'")
        return self


class InputSpec(Frozen):
    # the model's own name (an ONNX graph's `gpu_0/data_0` too): it only labels the input in
    # messages and manifests; files and function arguments go by position
    name: str = pydantic.Field(pattern=r"^[^\x00-\x1f\x7f]{1,200}$",
                               description="the input's name in the model (any printable text)")
    shape: tuple[int | str, ...] = pydantic.Field(
        description="sizes; a string names a dynamic dimension declared in `dynamic_dims`")
    dtype: DType = "float32"
    low: float | None = pydantic.Field(default=None, description="range of random samples")
    high: float | None = None
    static: bool = pydantic.Field(
        default=False, description="ONNX: the input's value in `samples:` is built into the "
                                   "module as a constant (shape, axes and size inputs are, "
                                   "without asking); the module ignores what is passed")


class DynamicDim(Frozen):
    min: int = pydantic.Field(ge=1)
    max: int = pydantic.Field(ge=1)
    example: int | None = pydantic.Field(default=None, description="size used for samples")


class Tolerance(Frozen):
    """How close a module's output must be to the golden one. A value left out (None) is the
    default for the output's dtype (validate/tolerance.py; docs/reference/validation.md)."""

    atol: float | None = pydantic.Field(
        default=None, ge=0, description="absolute error allowed; default by dtype (float32 "
                                        "1e-4, float16/bfloat16 8 eps, integers and bool 0)")
    rtol: float | None = pydantic.Field(
        default=None, ge=0, description="relative error allowed (of the golden value); default "
                                        "by dtype (float32 1e-3, float16/bfloat16 8 eps)")
    min_cosine: float | None = pydantic.Field(
        default=None, ge=-1, le=1, description="lowest cosine similarity (float outputs whose "
                                               "reference is not all within atol of zero); "
                                               "default 0.999")
    top1: Literal["auto", "always", "never"] | None = pydantic.Field(
        default=None, description="compare arg-max per row; 'auto' (the default): only for "
                                  "classifier-shaped outputs (docs: Validation rules)")


Metric = Literal["top1", "top5", "mse", "cosine"]


class DatasetGate(Frozen):
    """A labelled set run on the device at deploy: its score may not fall more than `max_drop`
    below the reference the build measured (docs/reference/validation.md)."""

    samples: str = pydantic.Field(
        description="a .npz (a key per input, samples stacked on a new leading axis; one "
                    "input: any key) or a directory of such .npz files (relative to the recipe)")
    labels: str = pydantic.Field(
        description=".npy: class indices (top1/top5), or target outputs stacked on a leading "
                    "axis (mse/cosine); custom metrics get it as it is")
    metric: str = pydantic.Field(
        default="top1", description="top1 | top5 (higher is better), mse (lower is better), "
                                    "cosine (higher), or 'module:function' — a Python callable "
                                    "run on the host: (outputs, labels) -> float, higher better")
    max_drop: float = pydantic.Field(
        default=0.01, ge=0, description="the largest drop allowed from the reference score "
                                        "(an increase, for mse)")
    reference: Literal["fp32", "golden"] = pydantic.Field(
        default="fp32", description="fp32: the float model's score; golden: the score of the "
                                    "model the golden outputs come from (a quantized build's "
                                    "own quantized reference)")
    limit: int | None = pydantic.Field(
        default=None, ge=1, description="use only the first N samples")
    everywhere: bool = pydantic.Field(
        default=False, description="fleets: run the set on every device, not only the canary "
                                   "wave")

    @pydantic.field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str) -> str:
        if metric not in ("top1", "top5", "mse", "cosine") and ":" not in metric:
            raise ValueError(f"metric {metric!r}: expected one of: top1, top5, mse, cosine, "
                             f"or 'module:function'")
        return metric


class Validation(Tolerance):
    """The top-level values apply to floating-point outputs; integer and bool outputs are
    compared exactly unless `outputs: {name: ...}` sets their tolerance."""

    repeat: int = pydantic.Field(
        default=1, ge=1, le=1000,
        description="run each validation sample this many times on the device and refuse a "
                    "module whose outputs differ between runs beyond the tolerance")
    dataset: DatasetGate | None = pydantic.Field(
        default=None, description="a labelled set scored on the device; refused when the "
                                  "score drops more than max_drop below the reference")

    outputs: dict[str, Tolerance] = pydantic.Field(
        default_factory=dict, description="per-output overrides, keyed by output name")
    reference: Literal["float32", "float64"] = pydantic.Field(
        default="float32",
        description="PyTorch models: the golden outputs' eager run; `float64` runs the model "
                    "in float64 (outputs rounded to the module's type) and the build says how "
                    "far eager float32 is from it, the error the module's is to be read against")
    accept_uninformative: bool | tuple[str, ...] = pydantic.Field(
        default=False,
        description="build although these outputs' golden values cannot tell a right module "
                    "from a wrong one (constant, all zero, all NaN/Inf, the same for every "
                    "sample): true for all outputs, or a list of output names")

    def for_output(self, name: str, exact: bool = False) -> Tolerance:
        """The tolerance written for output `name`: its own entry over the top-level values
        (these only for floating-point outputs: `exact` outputs are integer or bool); a field
        still None takes the dtype's default when compared."""
        own = self.outputs.get(name, Tolerance())
        if exact:
            return own
        top = self.model_dump(include={"atol", "rtol", "min_cosine", "top1"})
        return Tolerance(**{**{k: v for k, v in top.items() if v is not None},
                            **own.model_dump(exclude_none=True)})

    def accepts_uninformative(self, name: str) -> bool:
        accepted = self.accept_uninformative
        return accepted is True or (isinstance(accepted, tuple) and name in accepted)


class CompileOptions(Frozen):
    flags: tuple[str, ...] = pydantic.Field(
        default=(), description="extra iree-compile flags, after the target profile's")

    @pydantic.field_validator("flags")
    @classmethod
    def _flags_look_like_flags(cls, flags: tuple[str, ...]) -> tuple[str, ...]:
        for flag in flags:
            if not flag.startswith("--"):
                raise ValueError(f"compile flags start with '--' (got {flag!r})")
        parse_edgekit_flags(flags)
        return flags


class Hooks(Frozen):
    """Commands run on the device (by its login shell, as the deploying user)."""

    after_activate: str | None = pydantic.Field(
        default=None, description="after `current` switched, e.g. restart the model's service")
    health: str | None = pydantic.Field(
        default=None, description="after `after_activate`; non-zero exit = unhealthy device")
    timeout_s: float = pydantic.Field(default=120, gt=0)


class TuneSettings(Frozen):
    """How `edgekit tune` measures this recipe's candidates (over the target profile's `tune:`;
    `edgekit tune --runtime` over both). Not part of what a build makes."""

    runtime: Literal["auto", "in-process", "tools"] | None = pydantic.Field(
        default=None,
        description="where candidates are timed: in-process (IREE's Python runtime, as "
                    "edgekit.compile and the Python API call a bundle), tools "
                    "(iree-benchmark-module, as a device's shims run it), auto (in-process for "
                    "a target this machine runs, the device's tools with --host); unset: the "
                    "profile's tune.runtime")


QuantizeMode = Literal["int8", "int8-weights", "fp16"]


class LayerError(Frozen):
    """One quantizable layer's measured error in the all-int8 model against the float model
    (`edgekit quantize search`: bisect's taps at the layer's output, worst sample)."""

    layer: str = pydantic.Field(description="module path, as `keep_float` names it")
    cosine: float | None = pydantic.Field(
        default=None, description="worst sample's cosine of the layer's output vs fp32")
    max_abs_error: float | None = pydantic.Field(default=None)
    added: float | None = pydantic.Field(
        default=None, description="the error the layer adds: its output's 1 - cosine minus "
                                  "that of the layer before it (what ranks the layers)")


class SearchCandidate(Frozen):
    float_layers: int = pydantic.Field(ge=0, description="the k worst layers kept in float")
    score: float
    drop: float


class QuantizeSearch(Frozen):
    """What `edgekit quantize search` measured, written with the `keep_float` it chose so that
    the build records why those layers stayed float (an input of the build, like a tuning)."""

    metric: str
    max_drop: float = pydantic.Field(ge=0)
    reference_score: float = pydantic.Field(description="the float model's dataset score")
    layers: tuple[LayerError, ...] = pydantic.Field(
        default=(), description="every quantizable layer, worst (largest `added`) first")
    candidates: tuple[SearchCandidate, ...] = ()
    measured_on: str = ""


class Quantize(Frozen):
    """Post-training quantization (`quantize: int8` is short for `quantize: {mode: int8}`)."""

    mode: QuantizeMode = pydantic.Field(
        description="int8: int8 weights and activations, integer contractions (calibrated); "
                    "int8-weights: int8 weights, float compute; fp16: contraction inputs in f16")
    calibration: str | None = pydantic.Field(
        default=None, description="int8: a .npz of samples (key per input, samples stacked on a "
                                  "new leading axis) or 'module:function' yielding input tuples")
    held_out: str | None = pydantic.Field(
        default=None, description=".npz of samples (same layout) for the accuracy report; "
                                  "default: random samples from `inputs:`")
    held_out_count: int = pydantic.Field(default=8, ge=1, le=1000,
                                         description="random held-out samples when no .npz")
    weights: Literal["per-channel", "per-tensor"] | None = pydantic.Field(
        default=None, description="int8 weight scales: one per output channel or one per tensor "
                                  "(default: per-channel for int8; per-tensor for int8-weights, "
                                  "whose per-channel form IREE 3.13 does not compile)")
    allow_float_contractions: bool = pydantic.Field(
        default=False, description="int8: build even when some contractions stay floating point "
                                   "(the manifest records how many); default: refuse")
    min_cosine: float | None = pydantic.Field(
        default=None, ge=-1, le=1,
        description="fail the build when any held-out sample's output cosine vs fp32 is lower")
    npu_min_cosine: float | None = pydantic.Field(
        default=None, ge=-1, le=1,
        description="the floor for NPU targets instead of min_cosine: their quantizer makes "
                    "every op it can integer (softmax, layer norm through lookup tables), "
                    "which costs accuracy the CPU int8 path does not pay")
    float_model: str | None = pydantic.Field(
        default=None, description="ONNX QDQ models: the fp32 .onnx the model was quantized from "
                                  "(the accuracy report's reference)")
    max_drop: float | None = pydantic.Field(
        default=None, ge=0, le=1,
        description="int8: keep the fewest layers in float that bring the dataset score "
                    "(`validation.dataset`) within this drop of the float model's, chosen by "
                    "measured error (`edgekit quantize search`); the fastest such build is built")
    activation_matmuls: Literal["float", "int8"] = pydantic.Field(
        default="float",
        description="int8: matmuls of two computed operands (attention's scores and context, "
                    "no weight) stay float by default: int8 there quantizes both operands on "
                    "every call and saves no weight bytes (transformer block on host: slower "
                    "than float, pipeline/quantize/int8.py); `int8` quantizes them too")
    keep_float: tuple[str, ...] | None = pydantic.Field(
        default=None,
        description="int8: module paths whose convolutions/linears/matmuls stay float (a "
                    "module covers the layers inside it); with max_drop, given: no search")
    search: QuantizeSearch | None = pydantic.Field(
        default=None, description="written by `edgekit quantize search` with keep_float: the "
                                  "measured errors and scores (recorded in the manifest)")

    @pydantic.model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value):
        value = {"mode": value} if isinstance(value, str) else value
        if isinstance(value, dict) and value.get("weights") is None:
            mode = value.get("mode")
            default = {"int8": "per-channel", "int8-weights": "per-tensor"}.get(mode) \
                if isinstance(mode, str) else None
            value = {**value, "weights": default}
        return value

    @pydantic.model_validator(mode="after")
    def _calibration_form(self) -> "Quantize":
        if self.calibration and not (self.calibration.endswith(".npz") or ":" in self.calibration):
            raise ValueError("`calibration` is a .npz file or 'module:function'")
        return self

    @pydantic.model_validator(mode="after")
    def _mixed_precision_is_int8(self) -> "Quantize":
        for key in ("max_drop", "keep_float"):
            if getattr(self, key) is not None and self.mode != "int8":
                raise ValueError(f"`{key}` chooses layers to keep in float in an int8 build "
                                 f"(mode is {self.mode})")
        return self

    @property
    def searches(self) -> bool:
        """A build must search for the layers to keep float (max_drop, no keep_float yet)."""
        return self.max_drop is not None and self.keep_float is None


class Recipe(Frozen):
    name: str = pydantic.Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                               description="app name; also names the bundle")
    model: ModelSource
    inputs: tuple[InputSpec, ...] = pydantic.Field(
        default=(), description="input signature; omitted: taken from the factory's examples")
    dynamic_dims: dict[str, DynamicDim] = pydantic.Field(default_factory=dict)
    lowering: LoweringChoice = "auto"
    compile: CompileOptions = CompileOptions()
    validation: Validation = Validation()
    samples: str | None = pydantic.Field(
        default=None, description=".npz of sample inputs (keys: input names)")
    seed: int = pydantic.Field(default=0, description="seed for random samples")
    quantize: Quantize | None = pydantic.Field(
        default=None, description="int8 | int8-weights | fp16, or a mapping with `mode:` and "
                                  "calibration/accuracy settings")
    hooks: Hooks = pydantic.Field(default_factory=lambda: Hooks(),
                                  description="commands run on the device after activation")
    timeouts: Timeouts | None = pydantic.Field(
        default=None, exclude=True,
        description="deadlines for talking to the device when deploying this recipe (over the "
                    "target profile's); not part of the build's cache key")
    tune: TuneSettings | None = pydantic.Field(
        default=None, exclude=True,
        description="how `edgekit tune` measures this model (over the target profile's "
                    "`tune:`); not part of the build's cache key")
    _path: Path = pydantic.PrivateAttr(default=Path("recipe.yaml"))

    @pydantic.field_validator("quantize")
    @classmethod
    def _quantize_fits_source(cls, quantize: Quantize | None, info) -> Quantize | None:
        """PyTorch models are quantized by the build (int8 needs calibration); ONNX models
        arrive quantized (QDQ) and `quantize:` only sets the checks and the accuracy report."""
        source = info.data.get("model")
        if quantize is None or source is None:
            return quantize
        validation = info.data.get("validation")
        if quantize.max_drop is not None and (validation is None or validation.dataset is None):
            raise ValueError("`max_drop` is a drop of the dataset score: add "
                             "`validation.dataset: {samples: …, labels: …}` (the set the "
                             "candidates are scored on)")
        if source.onnx and (quantize.max_drop is not None or quantize.keep_float is not None):
            raise ValueError("`max_drop`/`keep_float` choose layers for edgekit's PyTorch "
                             "quantizer; an ONNX QDQ model arrives quantized")
        if source.onnx:
            if quantize.mode != "int8" or quantize.calibration:
                raise ValueError(
                    "an ONNX model is quantized before the build: make a QDQ model with "
                    "onnxruntime's quantize_static(..., quant_format=QuantFormat.QDQ); for ONNX, "
                    "`quantize:` takes `mode: int8` with float_model, held_out, min_cosine, "
                    "allow_float_contractions")
        elif quantize.float_model:
            raise ValueError("`float_model` is for ONNX QDQ models (a PyTorch model is its own "
                             "fp32 reference)")
        elif quantize.mode == "int8" and not quantize.calibration:
            raise ValueError("`int8` needs calibration data: write `quantize: {mode: int8, "
                             "calibration: samples.npz}` (or 'module:function')")
        return quantize

    @pydantic.model_validator(mode="after")
    def _dynamic_dims_declared(self) -> "Recipe":
        for spec in self.inputs:
            for dim in spec.shape:
                if isinstance(dim, str) and dim not in self.dynamic_dims:
                    raise ValueError(f"input '{spec.name}' uses dynamic dim '{dim}' which is not "
                                     "declared under `dynamic_dims`")
        return self

    @property
    def source(self) -> str:
        """The model source as written (for manifests and messages)."""
        return self.model.python or self.model.exported or self.model.onnx or ""

    @property
    def path(self) -> Path:
        """The recipe file this came from (relative paths in it are relative to its folder)."""
        return self._path

    def trusting_pickle(self) -> "Recipe":
        """The recipe with its .pt2 trusted (`--trust-pickle`); unchanged for other sources."""
        if not self.model.exported:
            return self
        return self.model_copy(update={"model": self.model.model_copy(
            update={"trust_pickle": True})})

    def resolve(self, relative: str) -> Path:
        """A path written in the recipe, relative to the recipe's directory."""
        p = Path(relative)
        return p if p.is_absolute() else (self.path.parent / p)


def load_recipe(path: str | Path) -> Recipe:
    """Parse and check a recipe; every mistake is a ConfigError with file:line and key."""
    path = Path(path)
    if not path.exists():
        raise _recipe_not_found(path)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise ConfigError("a recipe must be a mapping of keys", where=doc.where(()))
    recipe = validate(doc, Recipe, data={"name": path.stem, **doc.data})
    recipe._path = path
    quantize = recipe.quantize
    calibration = quantize.calibration if quantize else None
    factory_file = (recipe.model.python or "").rpartition(":")[0]
    files = (("model.exported", recipe.model.exported), ("model.onnx", recipe.model.onnx),
             # a factory's .py file like the other model files: a config error (exit 2)
             ("model.python", factory_file if factory_file.endswith(".py") else None),
             ("samples", recipe.samples),
             ("quantize.calibration",
              calibration if calibration and calibration.endswith(".npz") else None),
             ("quantize.held_out", quantize.held_out if quantize else None),
             ("quantize.float_model", quantize.float_model if quantize else None))
    for key, rel in files:
        if rel and not recipe.resolve(rel).is_file():
            loc = tuple(key.split("."))
            raise ConfigError(f"file not found: {recipe.resolve(rel)}", where=doc.where(loc),
                              key=key)
    return recipe


def _recipe_not_found(path: Path) -> ConfigError:
    """Where a recipe path was looked for (a relative one: from the working directory), and
    the example recipes edgekit ships, the closest name first."""
    import difflib
    import os
    from edgekit.config.resources import recipes_dir
    packaged = recipes_dir()
    names = sorted(p.name for p in packaged.glob("*.yaml"))
    close = difflib.get_close_matches(path.name, names, n=1)
    hint = (f"did you mean {packaged / close[0]}? " if close else "") + \
        f"the example recipes come with edgekit in {packaged}"
    if not path.is_absolute():
        hint = f"a relative path is read from the working directory, {os.getcwd()}; {hint}"
    return ConfigError("recipe file not found", where=str(path), hint=hint)


def recipe_json_schema() -> dict:
    schema = Recipe.model_json_schema()
    schema["title"] = "edgekit recipe"
    return schema
