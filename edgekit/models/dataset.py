"""What a bundle records of its dataset gate (`validation.dataset`): where its samples and
labels are in the bundle (golden/ds-*.npy: uploaded, signed and verified with the release) and
the reference score the build measured; and the score a device measured (DatasetScore)."""

from __future__ import annotations

import math

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


SCORE_MAX = 1e12     # a score or drop beyond this is no measurement


class DatasetScore(Frozen):
    """A release's score on a device as its journal holds it (a `scored` event): shown by
    `releases`, `fleet status` and `bench`. Read from an untrusted device, so checked: a
    plain metric name, finite figures in range."""
    metric: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.:]{1,100}$")
    reference_score: float
    measured: float
    drop: float

    @pydantic.field_validator("reference_score", "measured", "drop", mode="before")
    @classmethod
    def _a_measurement(cls, value: object) -> float:
        if type(value) not in (int, float) or not math.isfinite(value) \
                or abs(value) > SCORE_MAX:
            raise ValueError(f"not a score: {str(value)[:40]}")
        return float(value)

    def __str__(self) -> str:
        return f"{self.metric} {self.measured:.4f} (ref {self.reference_score:.4f})"


def read_score(fields: object) -> DatasetScore | None:
    """`fields` (a journal's `scored` event, a fleet rollout's device-done `dataset`) as a
    DatasetScore; None for anything edgekit did not write: not a mapping, a metric that is no
    plain name, a figure that is not a finite number in range (the device is not trusted)."""
    if not isinstance(fields, dict):
        return None
    try:
        return DatasetScore.model_validate(
            {k: fields.get(k) for k in ("metric", "reference_score", "measured", "drop")})
    except pydantic.ValidationError:
        return None


def scores_line(scores: list[DatasetScore]) -> str:
    """One release's scores over devices: "top1 0.9688 (ref 0.9688) on 2 devices", the range
    of the measured scores where they differ (a module scores alike on devices of one target:
    a spread says one of them computes it differently)."""
    measured = [s.measured for s in scores]
    low, high = min(measured), max(measured)
    figure = f"{low:.4f}" if low == high else f"{low:.4f}–{high:.4f}"
    return (f"{scores[0].metric} {figure} (ref {scores[0].reference_score:.4f}) on "
            f"{len(scores)} device{'s' if len(scores) > 1 else ''}")
