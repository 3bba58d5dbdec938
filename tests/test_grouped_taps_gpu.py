"""conv_grouped_taps on a GPU: every instance, forward and backward-data, against the reference
on conv_grouped_mma's edge shapes and a few more (skipped where there is no GPU)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.grouped_taps import FILTERS, STRIDES
from kernels.conv.problem import ConvProblem
from tests.gpu_verify import verify_on_edges
from tests.test_grouped_mma_gpu import EDGES

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

MORE = [
    dict(N=16, C=256, K=256, G=32, H=28, W=28, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),                                                              # many tiles
    dict(N=2, C=320, K=320, G=20, H=15, W=13, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),                                                              # G 20, odd
    dict(N=3, C=96, K=96, G=6, H=9, W=17, R=5, S=5, pad_h=2, pad_w=2),          # 5x5
    dict(N=2, C=1024, K=1024, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),      # C/G 32
    dict(N=2, C=64, K=64, G=4, H=10, W=12, R=3, S=3),                           # no padding
    dict(N=1, C=32, K=32, G=4, H=9, W=8, R=5, S=5, pad_h=1, pad_w=1),           # partial pad
]


def serves(family: str, p: ConvProblem) -> bool:
    """The shapes the family is built for: a square filter and stride it is compiled for
    (backward-data: 1), no dilation (conv_grouped_mma's other conditions hold on every edge
    shape)."""
    strides = STRIDES if p.op == "conv2d_fwd" else (1,)
    return (p.R == p.S and p.R in FILTERS and p.stride_h == p.stride_w
            and p.stride_h in strides and (p.dil_h, p.dil_w) == (1, 1))


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_grouped_taps_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES + MORE]
    failures = verify_on_edges(worker, op, dtype, ["conv_grouped_taps"], problems, serves)
    assert not failures, "\n".join(failures[:40])


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()
