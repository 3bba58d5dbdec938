"""conv_pointwise on a GPU: every instance against the reference on edge shapes, forward and
backward-data (skipped where there is no GPU)."""

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
