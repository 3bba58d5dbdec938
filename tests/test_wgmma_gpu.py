"""conv_wgmma, conv_wgmma_split, conv_wgmma_im2col, conv_wgmma_cluster, conv_wgmma_red,
conv_wgmma_blockdiag, conv_wgmma_planes and conv_wgmma_blockdiag_weight on a Hopper GPU: every
instance against the reference on edge shapes, in every direction (skipped where there is no
GPU; an sm_90a compile is needed, so other GPUs record compile errors, which this test
reports)."""

import pytest

from farm.gpu import list_devices
from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from tests.gpu_verify import verify_on_edges

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

# Channels a group multiples of 8 (the family's rule), the rest at its edges: channels not
# multiples of the 64-wide k-tile or of the block's columns, ragged GEMM rows, odd sizes,
# stride 2 with odd inputs, dilation, 1x1 maps, N = 1, groups, a reduction of one k-tile and
# one of many, more than one tile in every GEMM dimension, more tiles than blocks.
EDGES = [
    dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=40, K=24, G=1, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=48, K=72, G=1, H=1, W=1, R=1, S=1),
    dict(N=2, C=32, K=24, G=1, H=17, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=32, K=32, G=4, H=12, W=12, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=4, C=64, K=136, G=1, H=14, W=14, R=1, S=1, stride_h=2, stride_w=2),
    dict(N=1, C=256, K=256, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=16, K=16, G=2, H=10, W=6, R=3, S=1, pad_h=1),
    dict(N=8, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=520, K=264, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=24, K=40, G=1, H=31, W=29, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=1, C=1024, K=256, G=1, H=14, W=14, R=1, S=1),
    # more tiles than the persistent grid's blocks: the stages' ring runs on across tiles
    dict(N=8, C=64, K=72, G=1, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=512, K=512, G=1, H=4, W=4, R=3, S=3, pad_h=1, pad_w=1),
    # 1x1 at stride 1 (tma 2 reads x or dy as a plain matrix): K and C not multiples of 64,
    # ragged rows, and more tiles than blocks with a reduction of four k-tiles, the last ragged
    dict(N=2, C=136, K=40, G=1, H=15, W=13, R=1, S=1),
    dict(N=8, C=96, K=200, G=1, H=56, W=56, R=1, S=1),
]


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_every_wgmma_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_wgmma"], problems)
    assert not failures, "\n".join(failures[:40])


# Shapes whose tiles leave the GPU idle (small N x P x Q, long reductions), where
# conv_wgmma_split splits: stride residues with taps of unequal counts, groups, ragged edges,
# and up to 36 slices adding into one tile.
SPLIT_EDGES = [
    dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=40, K=24, G=1, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=8, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=520, K=264, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=24, K=40, G=1, H=31, W=29, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=1, C=1024, K=256, G=1, H=14, W=14, R=1, S=1),
    dict(N=1, C=512, K=512, G=1, H=4, W=4, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=512, K=512, G=4, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=64, K=512, G=1, H=15, W=13, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    # 1x1 (tma 2): a reduction whose last k-tile is ragged, rows fewer than a tile
    dict(N=1, C=200, K=1000, G=1, H=7, W=7, R=1, S=1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_split_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in SPLIT_EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_wgmma_split"], problems)
    assert not failures, "\n".join(failures[:40])


# conv_wgmma_im2col: channels reduced over in whole 64-channel k-tiles; the im2col map's
# window at its edges: padding on both sides and none, stride 2 and 3 on odd sizes, H != W,
# R != S, dilation, 7x7 taps, groups of 64 channels, output channels not multiples of 64,
# maps smaller than a tile (the walk crossing images) and more tiles than blocks.
IM2COL_EDGES = [
    dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=128, K=72, G=1, H=13, W=11, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=64, K=192, G=1, H=17, W=15, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=128, K=64, G=1, H=12, W=10, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=128, K=144, G=2, H=9, W=7, R=3, S=1, pad_h=1),
    dict(N=1, C=64, K=128, G=1, H=31, W=29, R=7, S=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3),
    dict(N=5, C=192, K=64, G=1, H=7, W=5, R=1, S=3, pad_w=1),
    dict(N=2, C=64, K=64, G=1, H=11, W=14, R=3, S=3),
    dict(N=3, C=64, K=40, G=1, H=16, W=16, R=2, S=2, stride_h=2, stride_w=2),
    dict(N=2, C=128, K=128, G=1, H=22, W=20, R=5, S=5, stride_h=3, stride_w=3, pad_h=2, pad_w=2),
    dict(N=4, C=256, K=512, G=1, H=14, W=14, R=1, S=1, stride_h=2, stride_w=2),
    dict(N=8, C=64, K=128, G=1, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=512, K=512, G=1, H=4, W=4, R=3, S=3, pad_h=1, pad_w=1),
    # split reductions: a few tiles over long reductions, groups, a ragged last slice
    dict(N=1, C=1024, K=1024, G=1, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=768, K=3072, G=1, H=7, W=7, R=1, S=1),
    dict(N=1, C=1024, K=512, G=2, H=5, W=6, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=576, K=1344, G=1, H=7, W=7, R=1, S=1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_every_im2col_instance_is_right(worker, op, dtype):
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in IM2COL_EDGES]
    problems += [ConvProblem(op=op, dtype=dtype, **shape) for shape in EDGES
                 if shape["C"] // shape["G"] % 64 == 0 and shape["K"] // shape["G"] % 64 == 0]
    failures = verify_on_edges(worker, op, dtype, ["conv_wgmma_im2col"], problems,
                               must_serve=im2col_serves)
    assert not failures, "\n".join(failures[:40])


def im2col_serves(family: str, p: ConvProblem) -> bool:
    """Forward serves every edge (C/G a multiple of 64 each), backward-data those of stride 1
    with K/G a multiple of 64."""
    return p.op == "conv2d_fwd" or ((p.stride_h, p.stride_w) == (1, 1)
                                     and p.k_per_group % 64 == 0)


# conv_wgmma_cluster (backward-weight, the reduction split over a cluster's blocks): the edges
# above, and long reductions over few tiles of dw, with fewer k-tiles than some clusters' blocks.
CLUSTER_EDGES = EDGES + [
    dict(N=8, C=256, K=512, G=1, H=14, W=14, R=1, S=1),
    dict(N=4, C=1024, K=256, G=1, H=7, W=7, R=1, S=1),
    dict(N=1, C=64, K=64, G=1, H=5, W=5, R=1, S=1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_cluster_instance_is_right(worker, dtype):
    op = "conv2d_bwd_weight"
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in CLUSTER_EDGES]
    failures = verify_on_edges(worker, op, dtype, ["conv_wgmma_cluster"], problems)
    assert not failures, "\n".join(failures[:40])


# conv_wgmma_red and conv_wgmma_planes (conv_wgmma's split backward-weight, its sums added by
# red, or stored in a plane a slice): the edges above and the cluster edges' long reductions
# over few tiles, where the splits are many; not the edges of 64 output pixels or fewer, whose
# reduction is one slice (conv_wgmma's own).
RED_EDGES = [e for e in CLUSTER_EDGES if e["N"] * e["H"] * e["W"] > 64]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("family", ["conv_wgmma_red", "conv_wgmma_planes"])
def test_every_split_sum_instance_is_right(worker, family, dtype):
    op = "conv2d_bwd_weight"
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in RED_EDGES]
    failures = verify_on_edges(worker, op, dtype, [family], problems)
    assert not failures, "\n".join(failures[:40])


# conv_wgmma_blockdiag and conv_wgmma_blockdiag_weight (groups of 4 to 32 channels as
# super-groups of 64): stride 2 with ragged maps, 7x7, 32, 8 and 4 channels a group, outputs a
# group twice the inputs, three super-groups, 1x1, and more tiles than blocks.
BLOCKDIAG_EDGES = [
    dict(N=2, C=64, K=64, G=4, H=12, W=10, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=128, K=128, G=8, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=256, K=256, G=8, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=3, C=64, K=128, G=8, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=192, K=192, G=12, H=28, W=28, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
    dict(N=2, C=128, K=64, G=16, H=10, W=10, R=1, S=1),
    dict(N=8, C=128, K=128, G=4, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=128, K=128, G=32, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
]
# The forward's padded super-groups: C not a multiple of 64 (a last super-group of fewer
# groups, its copies past C zero-filled), widths that do not divide 64 (24, 40, 48: the next
# super-group's channels in the tap's copy; 112 and 168, two and three k-tiles a tap), and
# outputs twice the inputs.
PADDED_EDGES = [
    dict(N=2, C=144, K=144, G=9, H=13, W=11, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
    dict(N=2, C=96, K=96, G=4, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=120, K=240, G=3, H=10, W=10, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=96, K=96, G=2, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=200, K=200, G=25, H=8, W=8, R=1, S=1),
    dict(N=2, C=784, K=784, G=49, H=14, W=14, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
    dict(N=2, C=224, K=224, G=2, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=336, K=672, G=2, H=11, W=11, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
]
# The backward-weight's super-groups of groups that divide G without filling 64 channels (3 of
# 16, 6 of 8, 2 of 8), C not a multiple of 64, outputs a multiple of the inputs.
WEIGHT_EDGES = [
    dict(N=2, C=96, K=96, G=6, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=144, K=144, G=9, H=13, W=11, R=3, S=3, stride_h=2, stride_w=2, pad_h=1,
         pad_w=1),
    dict(N=2, C=48, K=96, G=6, H=10, W=10, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=208, K=208, G=26, H=8, W=8, R=1, S=1),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("op, family", [("conv2d_fwd", "conv_wgmma_blockdiag"),
                                        ("conv2d_bwd_weight", "conv_wgmma_blockdiag_weight")])
def test_every_blockdiag_instance_is_right(worker, op, family, dtype):
    edges = BLOCKDIAG_EDGES + (PADDED_EDGES if op == "conv2d_fwd" else WEIGHT_EDGES)
    problems = [ConvProblem(op=op, dtype=dtype, **shape) for shape in edges]
    failures = verify_on_edges(worker, op, dtype, [family], problems)
    assert not failures, "\n".join(failures[:40])
