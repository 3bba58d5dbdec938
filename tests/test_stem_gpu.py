"""conv_stem and conv_stem_bwd_weight on the GPU: every instance against the reference on edge
shapes of the three directions with 1 to 4 input channels a group (skipped where there is no
GPU)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.problem import ConvProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

# The stems (3 channels in, 4x4 at stride 4, 7x7 and 3x3 at stride 2), each C/G from 1 to 4,
# output channels not multiples of 8 (dy read one channel at a time), odd sizes, stride 3 with
# dilation, a 1x1 filter at stride 2 (pixels no tap reaches: zeros), stride 1, groups, N = 1,
# rows fewer than a thread's pixels, and a full-size stem.
EDGES = [
    dict(N=2, C=3, K=32, G=1, H=17, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=3, K=64, G=1, H=23, W=21, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=3, C=3, K=96, G=1, H=24, W=20, R=4, S=4, stride_h=4, stride_w=4),
    dict(N=2, C=1, K=24, G=1, H=13, W=11, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=2, K=40, G=1, H=12, W=9, R=5, S=3, stride_h=2, stride_w=1, pad_h=2, pad_w=1),
    dict(N=1, C=4, K=96, G=1, H=1, W=1, R=1, S=1),
    dict(N=2, C=4, K=20, G=1, H=19, W=14, R=3, S=3, stride_h=3, stride_w=3, dil_h=2, dil_w=2,
         pad_h=2, pad_w=2),
    dict(N=2, C=3, K=13, G=1, H=9, W=10, R=1, S=1, stride_h=2, stride_w=2),
    dict(N=1, C=3, K=16, G=1, H=10, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=4, K=16, G=2, H=11, W=8, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=3, K=8, G=1, H=3, W=5, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=3, K=64, G=1, H=224, W=224, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    # patch stems (backward-data's patch kernel): 2x2 and 4x4, groups, K not a multiple of 8
    dict(N=2, C=4, K=32, G=1, H=10, W=12, R=2, S=2, stride_h=2, stride_w=2),
    dict(N=2, C=4, K=16, G=2, H=8, W=12, R=4, S=4, stride_h=4, stride_w=4),
    dict(N=1, C=3, K=20, G=1, H=8, W=16, R=4, S=4, stride_h=4, stride_w=4),
]
# backward-weight also: 7x7 groups of 3 channels, input rows of an odd number of elements
WEIGHT_EDGES = EDGES + [
    dict(N=2, C=6, K=48, G=2, H=13, W=17, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=4, C=3, K=32, G=1, H=299, W=299, R=3, S=3, stride_h=2, stride_w=2),
    # groups of 8 to 32 channels (the input by 16-byte copies): stride 2, 7x7 maps, 5x5
    dict(N=2, C=64, K=64, G=4, H=15, W=13, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=512, K=512, G=32, H=14, W=14, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
    dict(N=2, C=256, K=256, G=8, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=96, K=48, G=6, H=9, W=11, R=5, S=5, pad_h=2, pad_w=2),
]


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_stem_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_stem"], problems)
    assert not failures, "\n".join(failures[:40])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_stem_bwd_weight_instance_is_right(worker, dtype):
    """Every edge whose K/G is a multiple of 8 (dy's 16-byte copies) must be served."""
    problems = [ConvProblem(op="conv2d_bwd_weight", dtype=dtype, **shape)
                for shape in WEIGHT_EDGES]
    failures = verify_on_edges(worker, "conv2d_bwd_weight", dtype, ["conv_stem_bwd_weight"],
                               problems, lambda family, p: p.k_per_group % 8 == 0)
    assert not failures, "\n".join(failures[:40])
