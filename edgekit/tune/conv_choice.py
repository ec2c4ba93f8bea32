"""`edgekit tune --conv-choice`: per convolution, direct or im2col + matmul, by measured cost.

One pixel threshold (`--edgekit-convs-as-matmul=N`) cannot say which convolutions IREE runs
better as matmuls: on ResNet18-like the linalg (NCHW) lowering runs the strided convolutions
directly at 0.2–13 GFLOP/s whatever their size, while the TOSA (NHWC) lowering runs the 56² and
28² ones at 120–150 and only the 14² and 7² ones badly. So, after the variant is chosen:

1. Build the variant with every convolution direct and with every one (groups 1) as im2col +
   matmul (`--edgekit-im2col-convs=all`); the variant's own conv options are dropped for both.
2. Here: take each dispatch's time from IREE's HAL profile (the fastest call × calls, best of
   two profiles: tune/dispatch_search.py) and give it to the convolutions whose shape the
   dispatch's name carries (`match_dispatches`: conv_/matmul_like_ names in NCHW or NHWC order
   for the direct build, matmul_MxNxK with M = output pixels, N = output channels,
   K = kernel taps × input channels for the im2col one). What the im2col build spends outside
   matched dispatches beyond the direct build (the patch copies, packs) is shared among its
   matmuls by patch size. Per shape the cheaper wins (`pick`); convolutions of one shape run
   the same kernel, so they go together.
3. Build the mix (`--edgekit-im2col-convs=<indices>`) and measure it against the chosen variant
   as the tuner measures everything (validated, interleaved rounds); it replaces the choice only
   when clearly faster (tuner.clearly_faster).

On a device (`--host`) there is no HAL profile to read (edgekit runs the device's
iree-benchmark-module, which records no per-dispatch times it returns), so the step falls back
to whole-model timing there: the all-im2col build is measured against the chosen variant, and
the progress line says so.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.config.edgekit_flags import PREFIX, format_selection
from edgekit.errors import EdgekitError
from edgekit.pipeline.build import BuildOptions, Variant, build
from edgekit.pipeline.rewrite import ConvShape

CONV_OPTIONS = (f"{PREFIX}convs-as-matmul=", f"{PREFIX}im2col-convs=",
                f"{PREFIX}pointwise-as-matmul=")
_NAME = re.compile(r"_(conv|matmul_like|batch_matmul|matmul)_((?:\d+x)+\d+)_f")
MARGIN = 0.05          # im2col must be this much cheaper: a tie keeps the direct convolution

Shape = tuple[int, int, int, int, int, int]   # cout, oh, ow, cin, kh, kw


def shape_of(c: ConvShape) -> Shape:
    return (c.cout, c.oh, c.ow, c.cin, c.kh, c.kw)


def direct_names(s: Shape) -> set[tuple[int, ...]]:
    """The dims IREE's dispatch name gives a direct convolution of this shape: NCHW (linalg:
    conv_CoutxOHxOWxCinxKhxKw, 1x1: matmul_like_CoutxOHxOWxCin) or NHWC (tosa:
    conv_OHxOWxCoutxKhxKwxCin, 1x1: matmul_like_OHxOWxCoutxCin, or with the pixels collapsed,
    matmul_like_(OH·OW)xCoutxCin, as the TOSA path gives MobileNetV2-like's projections)."""
    cout, oh, ow, cin, kh, kw = s
    if (kh, kw) == (1, 1):
        return {(cout, oh, ow, cin), (oh, ow, cout, cin), (oh * ow, cout, cin)}
    return {(cout, oh, ow, cin, kh, kw), (oh, ow, cout, kh, kw, cin)}


def matmul_name(s: Shape) -> tuple[int, ...]:
    cout, oh, ow, cin, kh, kw = s
    return (oh * ow, cout, kh * kw * cin)


def name_dims(dispatch: str) -> tuple[int, ...] | None:
    m = _NAME.search(dispatch)
    if not m:
        return None
    dims = tuple(int(d) for d in m.group(2).split("x"))
    return dims[1:] if m.group(1) == "batch_matmul" and dims[0] == 1 else dims


def match_dispatches(costs: dict[str, float], shapes: set[Shape], im2col: bool
                     ) -> tuple[dict[Shape, float], float]:
    """({shape: ms of the dispatches whose name is that shape's}, ms of the rest). A name that
    fits two shapes belongs to neither."""
    per_shape: dict[Shape, float] = {}
    rest = 0.0
    for key, ms in costs.items():
        dims = name_dims(key)
        fits = [s for s in shapes
                if dims is not None and (dims == matmul_name(s) if im2col
                                         else dims in direct_names(s))]
        if len(fits) == 1:
            per_shape[fits[0]] = per_shape.get(fits[0], 0.0) + ms
        else:
            rest += ms
    return per_shape, rest


@dataclass(frozen=True)
class ShapeChoice:
    shape: Shape
    direct_ms: float | None
    im2col_ms: float | None       # its matmul plus its share of the im2col build's extra work
    im2col: bool

    def note(self) -> str:
        cout, oh, ow, cin, kh, kw = self.shape
        name = f"{cout}x{oh}x{ow}x{cin}x{kh}x{kw}"
        d = "?" if self.direct_ms is None else f"{self.direct_ms:.3f}"
        i = "?" if self.im2col_ms is None else f"{self.im2col_ms:.3f}"
        return f"{name}: direct {d} / im2col {i} ms → {'im2col' if self.im2col else 'direct'}"


def pick(direct: dict[str, float], im2col: dict[str, float], shapes: set[Shape]
         ) -> list[ShapeChoice]:
    """Per convolution shape, direct or im2col from the two builds' per-dispatch costs (ms per
    inference). A shape either profile cannot place stays direct."""
    on_direct, rest_direct = match_dispatches(direct, shapes, im2col=False)
    on_im2col, rest_im2col = match_dispatches(im2col, shapes, im2col=True)
    extra = max(0.0, rest_im2col - rest_direct)   # patch copies, packs of the patches
    patch = {s: matmul_name(s)[0] * matmul_name(s)[2] for s in on_im2col}
    total = sum(patch.values()) or 1
    out = []
    for s in sorted(shapes):
        d = on_direct.get(s)
        i = on_im2col.get(s)
        i = None if i is None else i + extra * patch[s] / total
        better = d is not None and i is not None and i < d * (1 - MARGIN)
        out.append(ShapeChoice(s, d, i, better))
    return out


def without_conv_options(flags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f for f in flags if not f.startswith(CONV_OPTIONS))


def selection_for(convs: list[ConvShape], choices: list[ShapeChoice]) -> str:
    """The `im2col-convs` value for the shapes chosen as im2col ("" when none is, "all" when
    every convolution im2col applies to is)."""
    chosen = {c.shape for c in choices if c.im2col}
    eligible = [c for c in convs if c.im2col_ok]
    picked = [c.index for c in eligible if shape_of(c) in chosen]
    return "all" if picked and len(picked) == len(eligible) else format_selection(picked)


def model_convs(recipe_path: Path) -> list[ConvShape]:
    """The recipe's model's convolutions as exported (none for an ONNX model: edgekit's
    rewrites work on PyTorch's exported program)."""
    import torch

    from edgekit.config.recipe import load_recipe
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.pipeline.rewrite import conv_shapes
    recipe = load_recipe(recipe_path)
    program, _ = frontend_for(recipe.model).graph_to_check(recipe)
    if not isinstance(program, torch.export.ExportedProgram):
        return []
    return conv_shapes(program)


def choose_convs(options, target, chosen, say) -> tuple[object, list]:
    """(the candidate builds should use, the per-conv candidates' results). `chosen` is the
    tuner's choice (a CandidateResult); it stays unless the mix clearly beats it."""
    from edgekit.tune import tuner
    from edgekit.tune.dispatch_search import _steady_costs
    convs = [c for c in model_convs(options.recipe) if c.im2col_ok]
    if not convs:
        say("no per-convolution choice: the model has no convolution im2col applies to")
        return chosen, []
    base = Variant(chosen.lowering, chosen.flag_set, chosen.flags)
    plain = without_conv_options(chosen.flags)
    direct = Variant(chosen.lowering, f"{chosen.flag_set}+all-direct", plain)
    im2col = Variant(chosen.lowering, f"{chosen.flag_set}+all-im2col",
                     (*plain, f"{PREFIX}im2col-convs=all"))
    results: list = []
    with tempfile.TemporaryDirectory(prefix="edgekit-tune-convs-") as tmp:
        work = Path(tmp)

        def build_one(variant: Variant, name: str):
            say(f"building {variant.name}")
            try:
                return build(BuildOptions(recipe=options.recipe, target=options.target,
                                          out=work / name, variant=variant,
                                          use_cache=options.use_cache, use_tuned=False)).bundle
            except EdgekitError as exc:
                results.append(tuner._result(variant, chosen.threads, "build-failed",
                                             tuner._one_line(exc)))
                return None

        here = options.host is None and tuner.runs_here(target)
        to_measure: list[tuple[Variant, object, str]] = []
        if here:
            built = {v.name: b for v, n in ((direct, "direct"), (im2col, "im2col"))
                     if (b := build_one(v, n)) is not None}
            if len(built) < 2:
                return chosen, results
            say("timing each convolution direct and as im2col by the HAL profile "
                f"({chosen.threads} thread(s))")
            costs_direct = _steady_costs(built[direct.name], work, chosen.threads)
            costs_im2col = _steady_costs(built[im2col.name], work, chosen.threads)
            if not costs_direct or not costs_im2col:
                say("no per-convolution choice: the HAL profile did not run")
                return chosen, results
            choices = pick(costs_direct, costs_im2col, {shape_of(c) for c in convs})
            why = "; ".join(c.note() for c in choices)
            selection = selection_for(convs, choices)
            mix_flags = (*plain, f"{PREFIX}im2col-convs={selection}") if selection else plain
            mix = Variant(chosen.lowering,
                          f"{chosen.flag_set}+im2col-convs={selection or 'none'}", mix_flags)
            say(f"per convolution: {why}")
            if mix_flags == base.flags:
                say("the per-convolution choice is the chosen variant itself")
                return chosen, results
            bundle = {plain: built[direct.name],
                      im2col.flags: built[im2col.name]}.get(mix_flags) \
                or build_one(mix, "mix")
            if bundle is not None:
                to_measure.append((mix, bundle, why))
        else:
            say("per-convolution choice on a device: no HAL profile there, so the all-im2col "
                "build is timed whole against the chosen variant")
            bundle = build_one(im2col, "im2col")
            if bundle is not None and im2col.flags != base.flags:
                to_measure.append((im2col, bundle, "whole-model timing (device)"))
        base_bundle = build_one(base, "base") if to_measure else None
        if base_bundle is None:
            return chosen, results
        # decided here, while the builds exist: a near miss is measured again on them
        kept, tried = tuner.refined(options, target, chosen, (base, base_bundle), to_measure,
                                    say, paired_note=True)
        return kept, results + tried
