"""What a bundle records of its dataset gate (`validation.dataset`): where its samples and
labels are in the bundle (golden/ds-*.npy: uploaded, signed and verified with the release) and
the reference score the build measured."""

from __future__ import annotations

import pydantic

from edgekit.config.schema_base import Frozen


class DatasetNote(Frozen):
    count: int = pydantic.Field(ge=1)          # samples: golden/ds-<i>-<j>.npy, input j
    inputs: int = pydantic.Field(ge=1)
    labels: str = "golden/ds-labels.npy"
    metric: str                                # top1 | top5 | mse | cosine | module:function
    max_drop: float = pydantic.Field(ge=0)
    reference: str                             # fp32 | golden: what scored `reference_score`
    reference_score: float
    everywhere: bool = False                   # fleets: every wave, not the canary only

    def sample_files(self, i: int) -> list[str]:
        return [f"golden/ds-{i}-{j}.npy" for j in range(self.inputs)]
