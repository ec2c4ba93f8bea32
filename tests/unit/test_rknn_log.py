"""Pure logic of the rknn stage: the compiler's layer table and the simulator's comparison."""

import dataclasses

import numpy as np

from edgekit.models.bundle import TensorSig
from edgekit.pipeline.npu.rknn import RknnJob, layer_table, memory_kib, simulator_check

# rknn-toolkit2 2.5.0's verbose build log for a 3-conv CNN (trimmed to the lines we read)
LOG = """\
D RKNN: [01:56:30.864] ID   OpType             DataType Target InputShape                               OutputShape            Cycles(DDR/NPU/Total)    RW(KB)       FullName
D RKNN: [01:56:30.864] 0    InputOperator      INT8     CPU    \\                                        (1,3,32,32)            0/0/0                    0            InputOperator:image
D RKNN: [01:56:30.864] 1    ConvRelu           INT8     NPU    (1,3,32,32),(16,3,3,3),(16)              (1,16,16,16)           412/2304/2304            5            Conv:node_Conv_63
D RKNN: [01:56:30.864] 5    Conv               INT8     NPU    (1,64,8,8),(1,64,7,7),(64)               (1,64,2,2)             339/784/784              7            Conv:relu_3_gavg_2conv0
D RKNN: [01:56:30.864] 7    MatMul             FLOAT16  CPU    (4,64),(64,10)                           (4,10)                 0/0/0                    0            MatMul:head
D RKNN: [01:56:30.864] 8    Reshape            INT8     CPU    (1,10,1,1),(2)                           (1,10)                 0/0/0                    0            Reshape:linear_mm_tp_rs
D RKNN: [01:56:30.864] Total Internal Memory Size: 19KB
D RKNN: [01:56:30.864] Total Weight Memory Size: 1.5MB
"""


def test_the_layer_table_gives_each_ops_placement_and_macs():
    ops = layer_table(LOG)
    assert [(o.op, o.placement) for o in ops] == [
        ("InputOperator", "cpu"), ("ConvRelu", "npu"), ("Conv", "npu"), ("MatMul", "cpu"),
        ("Reshape", "cpu")]
    assert ops[1].macs == 16 * 3 * 3 * 3 * 16 * 16       # weight size × output pixels
    assert ops[2].macs == 64 * 7 * 7 * 2 * 2             # depthwise: weight (1, C, kh, kw)
    assert ops[3].macs == 64 * 10 * 4                     # matmul: weight × output rows
    assert ops[4].macs == 0 and "CPU" in ops[4].reason
    assert memory_kib(LOG) == {"internal": 19.0, "weight": 1536.0}


def _job(floor=0.98, top1="always"):
    return RknnJob(float_model=None, calibration=(), min_cosine=floor, top1=top1, where="r")


@dataclasses.dataclass
class _Model:       # the fields simulator_check reads of an ExportedModel
    outputs: tuple
    quantization: object = None
    reference: str = "PyTorch"


def test_the_simulator_check_holds_the_floor_and_top1_over_every_sample():
    model = _Model(outputs=(TensorSig(name="logits", shape=(1, 4), dtype="float32"),))
    golden = [(np.array([[0.0, 1.0, 2.0, 2.55]], np.float32),),
              (np.array([[3.0, 1.0, 0.0, 0.0]], np.float32),)]
    close = [(g[0] + 0.02,) for g in golden]
    check = simulator_check(_job(), model, close, golden)
    assert check.ok and check.worst_lsb == 2           # 0.02 over a 2.55 range: 2 int8 steps
    assert "float model" in check.summary and "top-1 agreement 100%" in check.summary
    swapped = [close[0], (np.array([[0.0, 1.0, 3.0, 0.0]], np.float32),)]
    failed = simulator_check(_job(), model, swapped, golden)
    assert not failed.ok and "sample 1" in failed.problem and "top-1" in failed.problem
    assert "cosine" in failed.problem                   # below 0.98 too
