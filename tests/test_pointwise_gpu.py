"""conv_pointwise and conv_pointwise_cluster on a GPU: every instance against the reference on
edge shapes, forward and backward-data (skipped where there is no GPU)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.problem import ConvProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

# Pointwise layers at the family's edges: channels not multiples of 16 (zeros in the last
# k-step, a last column block of 8), more output channels than a pass (several passes), the
# fewest channels, pixels that end inside a chunk, fewer chunks than warps, more chunks than
# the persistent grid's warps, and a weight large enough that only some configurations fit.
EDGES = [
    dict(N=2, C=16, K=16, G=1, H=7, W=9, R=1, S=1),
    dict(N=1, C=24, K=40, G=1, H=13, W=11, R=1, S=1),
    dict(N=3, C=8, K=8, G=1, H=5, W=5, R=1, S=1),
    dict(N=2, C=256, K=72, G=1, H=9, W=7, R=1, S=1),
    dict(N=2, C=72, K=256, G=1, H=9, W=7, R=1, S=1),
    dict(N=1, C=200, K=136, G=1, H=5, W=3, R=1, S=1),
    dict(N=8, C=32, K=96, G=1, H=56, W=56, R=1, S=1),
    dict(N=4, C=144, K=24, G=1, H=28, W=28, R=1, S=1),
    dict(N=1, C=128, K=128, G=1, H=14, W=14, R=1, S=1),
]


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_pointwise_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_pointwise"], problems)
    assert not failures, "\n".join(failures[:40])


# Few pixels and long reductions (conv_pointwise_cluster): the squeeze-and-excitation layers'
# 1x1 maps at N = 32, 8 and 1, reductions not a multiple of the 64-wide chunk, fewer chunks than
# the cluster's blocks, output channels not a multiple of the tile's, pixels not a multiple of
# the tile's rows, and a 7x7 map.
FEW_PIXELS = [
    dict(N=32, C=48, K=1152, G=1, H=1, W=1, R=1, S=1),
    dict(N=8, C=240, K=960, G=1, H=1, W=1, R=1, S=1),
    dict(N=1, C=1152, K=48, G=1, H=1, W=1, R=1, S=1),
    dict(N=32, C=8, K=64, G=1, H=1, W=1, R=1, S=1),
    dict(N=3, C=136, K=200, G=1, H=1, W=1, R=1, S=1),
    dict(N=2, C=960, K=160, G=1, H=7, W=7, R=1, S=1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_pointwise_cluster_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in FEW_PIXELS]
    failures = verify_on_edges(worker, op, dtype, ["conv_pointwise_cluster"], problems)
    assert not failures, "\n".join(failures[:40])
