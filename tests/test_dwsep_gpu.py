"""dwsep_fwd on a real GPU through the farm's measuring path: every instance of the dwsep
families and the vendor pair (PyTorch) verified against the GPU reference on the edge shapes,
in bf16 and fp16. A wrong or crashing instance fails, as does a vendor row that is not ok.
Skipped where there is no GPU."""

import os

import pytest

from farm.gpu import list_devices
from kernels.registry import operator_spec
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

OP = "dwsep_fwd"
ALL_FAMILIES = ("dwsep_chunked", "dwsep_resident", "dwsep_stream", "dwsep_halo",
                "dwsep_halo_tc", "dwsep_wgmma", "dwsep_wgmma_split", "dwsep_wgmma_split_staged",
                "dwsep_wgmma_staged",
                "dwsep_wgmma_resident", "dwsep_wgmma_bulk", "dwsep_wgmma_bulk_staged",
                "dwsep_wgmma_cluster", "dwsep_wgmma_ring", "vendor")
# FARM_GPU_FAMILIES="a b": verify those families only (the vendor's always)
FAMILIES = tuple(f for f in ALL_FAMILIES if f == "vendor" or f in os.environ.get(
    "FARM_GPU_FAMILIES", " ".join(ALL_FAMILIES)).split())
EDGES = [  # shape fields beyond the defaults
    dict(N=2, C=30, H=9, W=9, K=22, R=3, S=3, pad=1),  # C, K not multiples of any vector width
    dict(N=1, C=15, H=8, W=8, K=9, R=3, S=3, stride=2, pad=1),  # odd C and K
    dict(N=1, C=7, H=5, W=5, K=5, R=3, S=3, pad=1, multiplier=2),  # odd C, multiplier 2
    dict(N=1, C=32, H=1, W=1, K=64, R=3, S=3, pad=1),  # 1x1 map
    dict(N=2, C=24, H=15, W=13, K=40, R=3, S=3, stride=2, pad=1),  # stride 2, odd sizes
    dict(N=1, C=16, H=14, W=14, K=24, R=5, S=5, pad=2, multiplier=2, activation="relu6"),
    dict(N=3, C=48, H=7, W=7, K=160, R=7, S=7, pad=3, activation="silu", pw_bias=1),
    dict(N=2, C=240, H=28, W=28, K=80, R=3, S=3, stride=2, pad=1, activation="hardswish",
         pw_bias=1),  # MobileNetV3-Large's features.7
    dict(N=1, C=2048, H=10, W=10, K=2048, R=3, S=3, pad=1, activation="relu", pw_bias=1),
    dict(N=2, C=728, H=19, W=19, K=728, R=3, S=3, pad=1),  # Xception's middle flow
    dict(N=2, C=40, H=23, W=37, K=24, R=3, S=3, pad=1),  # maps no tile divides
    dict(N=2, C=56, H=21, W=19, K=40, R=5, S=5, pad=2, activation="relu"),  # 5x5, stride 1
    dict(N=1, C=72, H=29, W=27, K=48, R=5, S=5, stride=2, pad=2, pw_bias=1),  # 5x5, stride 2
    # C a multiple of 8 but not of the 64-channel chunk, K of no tile, several pixel tiles
    dict(N=3, C=200, H=13, W=11, K=90, R=3, S=3, stride=2, pad=1, activation="silu", pw_bias=1),
    dict(N=1, C=136, H=9, W=9, K=75, R=3, S=3, pad=1, activation="relu6"),  # odd K
    # several passes of output channels over a resident depthwise tile, K of no tile, C of no
    # chunk, more than one pixel tile; 3x3 stride 2, and 5x5 with the widest C that fits
    dict(N=2, C=136, H=21, W=17, K=390, R=3, S=3, stride=2, pad=1, activation="silu",
         pw_bias=1),
    dict(N=2, C=1024, H=9, W=9, K=515, R=5, S=5, pad=2, activation="relu6"),
    # no padding: a pixel tile spans several images, whose windows skip R - 1 input rows
    dict(N=5, C=64, H=7, W=6, K=200, R=3, S=3, pad=0, activation="relu"),
    # 7x7 over three chunks, the last of 8 channels: the staged CUDA-core fill of a cluster
    # split (dwsep_wgmma_split_staged's filter 0)
    dict(N=2, C=136, H=9, W=9, K=72, R=7, S=7, pad=3, activation="silu"),
    # 7x7 over four chunks (the last of 8 channels) and three channel tiles of 128: a cluster
    # of dwsep_wgmma_ring padded past K, its CUDA-core fill
    dict(N=2, C=200, H=11, W=11, K=300, R=7, S=7, pad=3, activation="silu", pw_bias=1),
]


def must_serve(family: str, problem) -> bool:
    """The halo and wgmma families copy 16 bytes along channels: multiplier 1 and C a
    multiple of 8 only; dwsep_halo_tc serves 5x5 filters at stride 1; dwsep_wgmma_resident,
    dwsep_wgmma_bulk, dwsep_wgmma_bulk_staged and dwsep_wgmma_cluster serve more than one pass of 128 output channels
    over a depthwise tile that fits in shared memory (C up to 1,024 at least); dwsep_wgmma_split
    and dwsep_wgmma_split_staged serve two chunks or more where their smallest unsplit grid is
    under two waves; dwsep_wgmma_ring two channel tiles of 128 and two chunks; the staged
    families' input rows fit beside their stages on every edge
    shape's map."""
    resident = family in ("dwsep_wgmma_resident", "dwsep_wgmma_bulk", "dwsep_wgmma_bulk_staged",
                          "dwsep_wgmma_cluster")
    if resident and (problem.K <= 128 or problem.MC > 1024):
        return False
    if family in ("dwsep_wgmma_split", "dwsep_wgmma_split_staged"):  # two chunks, few blocks
        pixels, tiles_k = problem.N * problem.P * problem.Q, -(-problem.K // 256)
        if problem.MC <= 64 or -(-pixels // 128) * tiles_k >= 264:
            return False
    if family == "dwsep_wgmma_ring" and (problem.K <= 128 or problem.MC <= 64):
        return False  # a cluster of two channel tiles and two chunks at least
    if family == "dwsep_halo_tc" and (problem.R, problem.S, problem.stride) != (5, 5, 1):
        return False
    return family not in ("dwsep_halo", "dwsep_halo_tc", "dwsep_wgmma", "dwsep_wgmma_split",
                          "dwsep_wgmma_split_staged",
                          "dwsep_wgmma_staged", "dwsep_wgmma_resident", "dwsep_wgmma_bulk",
                          "dwsep_wgmma_bulk_staged", "dwsep_wgmma_cluster",
                          "dwsep_wgmma_ring") or (
        problem.multiplier == 1 and problem.C % 8 == 0)


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_instance_and_the_vendor_are_right_on_the_edges(worker, dtype):
    spec = operator_spec(OP)
    failures = verify_on_edges(worker, OP, dtype, FAMILIES,
                               (spec.problem(dtype, fields) for fields in EDGES), must_serve)
    assert not failures, "\n".join(failures[:40])
