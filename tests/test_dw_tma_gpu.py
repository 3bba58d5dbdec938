"""conv_dw_tma, conv_dw_tma_bwd_weight and conv_dw_tc_bwd_weight on a GPU: every instance against the reference on edge
shapes, in every direction (skipped where there is no GPU; the families run on sm_90a only)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.problem import ConvProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

# C not a multiple of 64 (a block's last channels past C) and of 16, odd and tiny maps, maps
# no tile divides, stride 2 with odd sizes, padding 0 to 4 (uneven too), N = 1, more items
# than blocks; 3x3, 5x5 and 7x7 filters.
EDGES = [
    dict(N=2, C=40, K=40, G=40, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=96, K=96, G=96, H=15, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=144, K=144, G=144, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=8, K=8, G=8, H=1, W=1, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=200, K=200, G=200, H=7, W=9, R=3, S=3, pad_h=0, pad_w=0),
    dict(N=2, C=64, K=64, G=64, H=10, W=37, R=3, S=3, pad_h=2, pad_w=2),
    dict(N=8, C=32, K=32, G=32, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=128, K=128, G=128, H=9, W=8, R=3, S=3, stride_h=2, stride_w=2, pad_h=0, pad_w=1),
    dict(N=4, C=576, K=576, G=576, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=120, K=120, G=120, H=15, W=13, R=5, S=5, pad_h=2, pad_w=2),
    dict(N=1, C=72, K=72, G=72, H=17, W=19, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=48, K=48, G=48, H=11, W=12, R=7, S=7, pad_h=3, pad_w=3),
    dict(N=3, C=96, K=96, G=96, H=9, W=9, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=1, C=16, K=16, G=16, H=3, W=2, R=5, S=5, pad_h=1, pad_w=4),
]


def serves(family, problem):
    return problem.op == "conv2d_fwd" or problem.stride_h == 1


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_dw_tma_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_dw_tma"], problems, serves)
    assert not failures, "\n".join(failures[:40])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_dw_tma_bwd_weight_instance_is_right(worker, dtype):
    problems = [ConvProblem(op="conv2d_bwd_weight", dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, "conv2d_bwd_weight", dtype, ["conv_dw_tma_bwd_weight"],
                               problems)
    assert not failures, "\n".join(failures[:40])


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_dw_tc_bwd_weight_instance_is_right(worker, dtype):
    problems = [ConvProblem(op="conv2d_bwd_weight", dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, "conv2d_bwd_weight", dtype, ["conv_dw_tc_bwd_weight"],
                               problems)
    assert not failures, "\n".join(failures[:40])


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()
