"""`edgekit check MODEL --target T` for an NPU target: per op, where it would run — on the NPU,
in the CPU fallback (the IREE CPU module), or nowhere (unsupported) — and why.

The model is quantized and partitioned as a build does it, by the target's NPU family
(`NpuFamily.partition`; its own samples calibrate: placement does not depend on the values).
Ops the partitioner leaves out fall back to the CPU; whether the CPU can take them is what the
ordinary check says of the quantized model for the target's CPU (pipeline/check.py). A target
without a CPU module (`backend: none`) has no fallback: such ops are unsupported there.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from edgekit.config.profiles import Target
from edgekit.config.recipe import Recipe
from edgekit.pipeline.npu import split

@dataclass
class NpuOpRow:
    op: str
    count: int
    placement: str                    # npu | cpu | unsupported
    reason: str = ""
    macs: int = 0


@dataclass
class NpuCheckReport:
    model: str
    target: str
    accelerator: str
    ops: list[NpuOpRow] = field(default_factory=list)
    npu_mac_share: float | None = None
    partitions: int = 0
    cpu_check: str = ""               # what the CPU module's check said (a lowering, a failure)

    @property
    def buildable(self) -> bool:
        return all(r.placement != "unsupported" for r in self.ops)


def check_npu(recipe: Recipe, model: str, target: Target, repro: Path,
              on_progress=None) -> NpuCheckReport:
    from edgekit.pipeline.check import _norm, check_graph
    from edgekit.pipeline.frontends.registry import frontend_for
    from edgekit.pipeline.npu.registry import family_for
    from edgekit.toolchain.runner import keep_temps
    say = on_progress or (lambda _: None)
    family = family_for(target)
    family.refuse_unless_it_places_ops(target)
    frontend = frontend_for(recipe.model)
    say("load and export")
    exported = frontend.export(recipe, frontend.load(recipe))
    workdir = Path(tempfile.mkdtemp(prefix="edgekit-npu-check-"))
    try:
        say(f"quantize and partition ({family.kind})")
        graph = family.partition(recipe, exported, target, workdir,
                                 [exported.samples, *exported.more_samples])
    finally:
        if not keep_temps():
            shutil.rmtree(workdir, ignore_errors=True)
    report = NpuCheckReport(model=model, target=target.name, accelerator=target.npu.accelerator,
                            npu_mac_share=split.mac_share(graph.ops),
                            partitions=graph.partitions)
    fallback = [o for o in graph.ops if o.placement == "cpu"]
    failing: dict[str, str] = {}
    if fallback and target.backend != "none":
        say(f"the CPU module of the quantized model for {target.name}")
        from edgekit.pipeline.lower import INT8_LOWERINGS   # what an int8 build lowers by
        cpu_target = target.model_copy(update={"lowering": list(INT8_LOWERINGS)})
        cpu = check_graph(frontend, graph.quantized.program, model, cpu_target, repro, say)
        report.cpu_check = (f"builds through {cpu.chosen}" if cpu.chosen else
                            "; ".join(f"{k}: {v}" for k, v in cpu.failures.items()))
        failing = {_norm(s.op): s.failure for s in cpu.ops if not s.ok and s.failure}
    rows: dict[tuple[str, str, str], list] = {}
    for o in graph.ops:
        placement, reason = o.placement, o.reason
        if placement == "cpu" and target.backend == "none" and not split.is_boundary(o):
            placement, reason = "unsupported", (f"no CPU fallback on {target.name} (backend "
                                                f"none); {reason}")
        elif placement == "cpu" and _norm(o.op) in failing:
            placement, reason = "unsupported", f"CPU: {failing[_norm(o.op)]}; {reason}"
        rows.setdefault((o.op, placement, reason), []).append(o.macs)
    for (op, placement, reason), macs in rows.items():
        report.ops.append(NpuOpRow(op=op, count=len(macs), placement=placement, reason=reason,
                                   macs=sum(macs)))
    return report
