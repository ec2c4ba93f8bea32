import torch

import edgekit.compile as ec
from edgekit.examples.models import kws_mlp


def test_compiled_graphs_run_on_an_aarch64_device_with_eager_numbers(arm_device):
    torch._dynamo.reset()
    model, (x,) = kws_mlp()
    compiled = torch.compile(model, backend="edgekit",
                             options={"target": "rpi4", "device": arm_device.name})
    with torch.no_grad():
        for scale in (1.0, 2.0):
            torch.testing.assert_close(compiled(x * scale), model(x * scale), atol=1e-4,
                                       rtol=1e-4)
    stats = [s for s in ec.call_stats() if s["where"] == arm_device.name]
    assert stats and stats[-1]["calls"] == 2 and stats[-1]["mean_ms"] > 0
    torch._dynamo.reset()
