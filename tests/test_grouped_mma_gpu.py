"""conv_grouped_mma and conv_grouped_mma_bwd_weight on a GPU: every instance against the reference
on edge shapes, in every direction (skipped where there is no GPU)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.problem import ConvProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

# Groups of 1 to 64 channels (super-groups of several groups, of one, and a last one cut short
# by G), odd sizes, stride 2 and 3 (backward-data's residue classes, one with no tap at all
# under a 1x1 filter), dilation, 1x1 filters and maps, 5x5 filters, N = 1, more tiles than
# the persistent grid's blocks.
EDGES = [
    dict(N=2, C=128, K=128, G=32, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),       # C/G 4
    dict(N=1, C=64, K=64, G=8, H=15, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=144, K=144, G=9, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1),        # C/G 16, G 9
    dict(N=2, C=96, K=96, G=3, H=9, W=9, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=128, K=128, G=2, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),          # C/G 64
    dict(N=2, C=48, K=48, G=48, H=10, W=10, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=32, K=32, G=16, H=12, W=12, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=3, C=64, K=64, G=4, H=8, W=8, R=1, S=1),
    dict(N=1, C=256, K=256, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),         # C/G 8, N 1
    dict(N=2, C=64, K=64, G=4, H=9, W=9, R=1, S=1, stride_h=2, stride_w=2),      # no-tap class
    dict(N=1, C=32, K=32, G=2, H=13, W=14, R=3, S=3, stride_h=3, stride_w=3, pad_h=1, pad_w=1),
    dict(N=3, C=64, K=64, G=4, H=1, W=1, R=1, S=1),
    dict(N=16, C=64, K=64, G=4, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=24, K=24, G=3, H=11, W=10, R=3, S=3, stride_h=2, stride_w=1, pad_h=1, pad_w=0),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_grouped_mma_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_grouped_mma"], problems)
    assert not failures, "\n".join(failures[:40])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_grouped_mma_bwd_weight_instance_is_right(worker, dtype):
    problems = [ConvProblem(op="conv2d_bwd_weight", dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, "conv2d_bwd_weight", dtype,
                               ["conv_grouped_mma_bwd_weight"], problems)
    assert not failures, "\n".join(failures[:40])


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()
