"""The `edgekit` dynamo backend (registered through the `torch_dynamo_backends` entry point).

Each captured FX graph becomes a CompiledGraph. It compiles one *variant* per concrete input
signature: dynamo marks a dimension dynamic after it has seen two sizes and then passes SymInt
arguments; we specialize each size seen (IREE modules here are static-shaped), so recompiling on
new shapes works as users expect. A variant is exported by the PyTorch frontend (golden outputs
from eager), then goes through `edgekit build`'s BACK stages (rewrite → torch-mlir → IREE →
bundle) under the same cache key function, then runs through a generated Python wrapper (see
inspect.py).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils import _pytree as pytree

from edgekit.compile.inspect import record_use, wrapper_source
from edgekit.compile.runners import Runner, make_runner
from edgekit.compile.settings import CompileSettings, resolve_settings
from edgekit.config.profiles import Target, load_target
from edgekit.config.recipe import Validation
from edgekit.models.bundle import Bundle, QuantizationNote, load_bundle
from edgekit.pipeline.build import BACK, BackContext, build_key, cache_slot
from edgekit.pipeline.cache import BuildCache
from edgekit.pipeline.export import ExportedModel
from edgekit.pipeline.frontends.torch import TorchFrontend
from edgekit.pipeline.package import BundleIdentity
from edgekit.pipeline.stages import run_plan

_GRAPH_COUNTER = itertools.count()
_TORCH = TorchFrontend()
# A graph is held to the defaults of its outputs' dtypes (float32: atol 1e-4, rtol 1e-3; a
# float16 graph by float16's epsilon). Graphs are fragments of user code: a constant golden
# output is legitimate there, so they are not refused as uninformative (a recipe's build is).
GRAPH_TOLERANCE = Validation()


def edgekit_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None):
    """Dynamo backend entry: returns a callable that runs the graph through IREE."""
    settings = resolve_settings(options)
    target = load_target(settings.target)
    graph = CompiledGraph(next(_GRAPH_COUNTER), gm, settings, target)
    if all(isinstance(a, torch.Tensor) and not _symbolic(a) for a in example_inputs):
        graph.variant_for(list(example_inputs))  # compile now, as users expect from a backend
    return graph


_SHOWN_WARNINGS: set[tuple[type, str]] = set()


@contextlib.contextmanager
def _warnings_once():
    """Dependencies' warnings (torch's FutureWarnings) shown once per process, not once per
    compiled shape: torch's own catch_warnings blocks reset the usual once-per-place registry."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    for w in caught:
        key = (w.category, str(w.message))
        if key not in _SHOWN_WARNINGS:
            _SHOWN_WARNINGS.add(key)
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            # and never again in this process, also from torch's own calls outside this block
            # (leaving catch_warnings resets the once-per-place registry Python keeps)
            warnings.filterwarnings("ignore", message=re.escape(str(w.message)),
                                    category=w.category)


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _signature(arg) -> tuple:
    if isinstance(arg, torch.nn.Parameter):
        return ("parameter", id(arg), arg._version, tuple(arg.shape), str(arg.dtype))
    if isinstance(arg, torch.Tensor):
        return (tuple(arg.shape), str(arg.dtype))
    return ("value", int(arg) if isinstance(arg, torch.SymInt) else arg)


def _symbolic(t: torch.Tensor) -> bool:
    return any(isinstance(d, torch.SymInt) for d in t.shape)


def _is_fixed(arg) -> bool:
    """Scalars and parameters are baked into a variant; other tensors are its inputs."""
    return not isinstance(arg, torch.Tensor) or isinstance(arg, torch.nn.Parameter)


class _Specialized(torch.nn.Module):
    """The graph with its scalar arguments and parameters fixed to those of one call.

    Dynamo passes a module's parameters as graph inputs; baking them into the module (instead of
    copying every weight on every call, to a remote device too) is safe because a variant's
    signature includes each parameter's identity and version counter, which in-place updates
    (an optimizer step, load_state_dict) bump: a changed weight gets a new variant."""

    def __init__(self, gm: torch.fx.GraphModule, args: list):
        super().__init__()
        self.gm = gm
        self.scalars = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
        self.params = [i for i, a in enumerate(args) if isinstance(a, torch.nn.Parameter)]
        for i in self.params:  # buffers, so that torch.export sees them as the model's state
            self.register_buffer(f"param_{i}", args[i].detach())
        self.arity = len(args)

    def forward(self, *tensors):
        it = iter(tensors)
        return self.gm(*[self.scalars[i] if i in self.scalars else
                         getattr(self, f"param_{i}") if i in self.params else next(it)
                         for i in range(self.arity)])


@dataclass
class Variant:
    signature: tuple
    tensor_positions: tuple[int, ...]
    bundle: Bundle
    program: torch.export.ExportedProgram
    out_spec: pytree.TreeSpec
    runner: Runner
    wrapper_source: str
    call: object  # the function the wrapper source defines


class CompiledGraph:
    def __init__(self, index: int, gm: torch.fx.GraphModule, settings: CompileSettings,
                 target: Target):
        self.index = index
        self.gm = gm
        self.settings = settings
        self.target = target
        self.variants: dict[tuple, Variant] = {}

    def __call__(self, *args):
        variant = self.variant_for(list(args))
        record_use(self, variant)
        return variant.call(args)

    def variant_for(self, args: list) -> Variant:
        signature = tuple(_signature(a) for a in args)
        if signature not in self.variants:
            self.variants[signature] = self._compile(signature, args)
        return self.variants[signature]

    def _compile(self, signature: tuple, args: list) -> Variant:
        # the first call of a shape exports, lowers and compiles (tens of seconds on a first
        # run): say so on stderr rather than leave the caller looking at a silent call
        shapes = ", ".join("×".join(map(str, a.shape)) for a in args
                           if isinstance(a, torch.Tensor) and not isinstance(a, torch.nn.Parameter))
        _say(f"edgekit: torch.compile graph {self.index} ({shapes or 'no tensor inputs'}) for "
             f"{self.target.name}: export → torch-mlir → IREE…")
        started = time.perf_counter()
        with _warnings_once():
            variant = self._compile_variant(signature, args)
        _say(f"edgekit: torch.compile graph {self.index} ready in "
             f"{time.perf_counter() - started:.1f} s")
        return variant

    def _compile_variant(self, signature: tuple, args: list) -> Variant:
        concrete = [int(a) if isinstance(a, torch.SymInt) else a for a in args]
        module = _Specialized(self.gm, concrete)
        positions = tuple(i for i, a in enumerate(concrete) if not _is_fixed(a))
        tensors = tuple(concrete[i].detach() for i in positions)
        program = torch.export.export(module, tensors)
        samples = tuple(t.contiguous().cpu().numpy() for t in tensors)
        names = tuple(f"arg{i}" for i in positions)
        exported = _TORCH.exported(program, module, samples, names, [s.shape for s in samples])
        bundle = self._bundle(exported)
        runner = make_runner(bundle, self.index, self.settings.device, self.settings.identity)
        source = wrapper_source(self, signature, positions, bundle, runner)
        scope = {"runner": runner, "out_spec": program.call_spec.out_spec}
        exec(compile(source, f"<edgekit graph {self.index}>", "exec"), scope)  # our own code
        return Variant(signature, positions, bundle, program, program.call_spec.out_spec,
                       runner, source, scope["call"])

    def _bundle(self, exported: ExportedModel) -> Bundle:
        """Build (or take from the cache) the bundle for one variant: `edgekit build`'s BACK
        stages and key, with the settings where a build has its recipe."""
        s = self.settings
        key = build_key({"kind": "torch.compile graph", "lowering": s.lowering,
                         "flags": list(s.flags)}, self.target, exported)
        cache = BuildCache()
        slot = cache_slot(cache, key)     # another home's entry is not ours to use
        entry = cache.lookup(slot)
        if entry is None:
            def identity(quantization: QuantizationNote | None) -> BundleIdentity:
                return BundleIdentity(app=f"graph-{key[:12]}",
                                      model_source=f"torch.compile graph {self.index}",
                                      recipe_digest="", tolerances=GRAPH_TOLERANCE)
            workdir = Path(tempfile.mkdtemp(prefix="edgekit-graph-"))
            try:
                ctx = BackContext(self.target, s.lowering, s.flags, identity, workdir,
                                  workdir / "bundle", reproducer_dir=workdir / "reproducer")
                bundle = run_plan(BACK, ctx, exported, timings={})
                entry = cache.store(slot, bundle.path)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return load_bundle(entry)
