"""Pure logic of quantized builds: the contraction census parser, the fp16 reference."""

import torch

from edgekit.pipeline.lower import _census
from edgekit.pipeline.quantize.fp16 import Fp16Contractions
from edgekit.toolchain.iree import contraction_element_types

# global-optimization output, one op per line; R/P stand for the iterator types
GLOBAL_OPT = "\n".join([
    "%3 = linalg.generic {indexing_maps = [], R} ins(%1, %cst : tensor<8x32xi8>, "
    "tensor<96x32xi8>) outs(%2 : tensor<8x96xi32>) {",
    "%4 = linalg.generic {indexing_maps = [], R} ins(%1 : tensor<8x32xi8>) "
    "outs(%2 : tensor<8xi32>) {",
    "%5 = linalg.matmul ins(%a, %b : tensor<1x16xf32>, tensor<16x10xf32>) "
    "outs(%c : tensor<1x10xf32>) -> tensor<1x10xf32>",
    "%6 = linalg.batch_matmul ins(%a, %b : tensor<2x8x16xf16>, tensor<2x16x8xf16>) "
    "outs(%c : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>",
    "%7 = linalg.generic {indexing_maps = [], P} ins(%5, %x : tensor<1x10xf32>, "
    "tensor<1x10xf32>) outs(%c : tensor<1x10xf32>) {",
    "%8 = linalg.pooling_nchw_max ins(%a, %w : tensor<1x3x8x8xf32>, tensor<2x2xf32>) "
    "outs(%c : tensor<1x3x4x4xf32>) -> tensor<1x3x4x4xf32>",
]).replace("R}", 'iterator_types = ["parallel", "reduction"]}').replace(
    "P}", 'iterator_types = ["parallel", "parallel"]}')


def test_the_census_counts_two_input_contractions_by_element_type():
    types = contraction_element_types(GLOBAL_OPT)
    assert types == [("linalg.generic", ("i8", "i8")), ("linalg.matmul", ("f32", "f32")),
                     ("linalg.batch_matmul", ("f16", "f16"))]
    census = _census(types)
    assert (census.integer, census.f32, census.f16, census.total) == (1, 1, 1, 3)
    assert census.examples == ("linalg.matmul f32×f32", "linalg.batch_matmul f16×f16")


def test_the_census_reads_data_tiled_contractions_of_the_global_optimization_path():
    # `--iree-global-opt-data-tiling` + inner-tiled: the matmul is already an inner_tiled op
    line = ("%21 = iree_codegen.inner_tiled ins(%e, %__hoisted_tensor_1x11x16x4xi8) outs(%20) "
            "<indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>], kind = "
            "#iree_cpu.data_tiled_mma_layout<intrinsic = MMA_X86_AVX512VNNI_1x16x4_I32_UI8_I8, "
            "intrinsics_m = 29>, semantics = #iree_cpu.mma_semantics<>> : "
            "tensor<9x11x29x1x4xi8>, tensor<1x11x16x4xi8> into tensor<9x1x29x1x16xi32>")
    f32 = line.replace("xi8>", "xf32>").replace("%21", "%22")
    assert contraction_element_types(line + "\n" + f32) == [
        ("iree_codegen.inner_tiled", ("i8", "i8")), ("iree_codegen.inner_tiled", ("f32", "f32"))]


def test_the_fp16_reference_rounds_contraction_inputs_only():
    a = torch.tensor([[1.0 + 2 ** -12]])  # not representable in f16
    b = torch.tensor([[1.0]])
    with Fp16Contractions():
        product = a @ b
        total = a + b
    assert product.item() == 1.0            # the matmul read f16-rounded inputs
    assert total.item() == 2.0 + 2 ** -12   # elementwise math stays f32
