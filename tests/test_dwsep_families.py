"""The dwsep_fwd families without a GPU: their configuration spaces, the rules that refuse an
instance (shared memory, cluster splits, staged taps, halo tiles), every network problem
served by each tensor-core family, the launch geometry, and each family's largest
configuration compiled by NVRTC for sm_90a with no spill."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kernels.dwsep.families import SMEM_OPT_IN, DwsepWgmmaStaged
from kernels.registry import families_for, get_family, operator_spec

OP = "dwsep_fwd"
NETWORKS = Path(__file__).resolve().parents[1] / "jobs" / "networks" / "dwsep"


def problem(**fields):
    base = dict(N=1, C=64, H=14, W=14, K=64, R=3, S=3, pad=1)
    return operator_spec(OP).problem("bf16", {**base, **fields})


def instance(family: str, **settings):
    found = [i for i in get_family(family).instances(OP, "bf16")
             if all(i.settings[k] == v for k, v in settings.items())]
    assert found, f"no {family} instance with {settings}"
    return found[0]


def network_problems():
    shapes = []
    for path in sorted(NETWORKS.glob("*_n*.csv")):
        with path.open() as f:
            shapes += [problem(**{k: v for k, v in row.items() if k not in ("network", "layer")})
                       for row in csv.DictReader(f)]
    return shapes


def test_config_spaces_are_distinct_and_tensor_core_families_have_no_fp32():
    for family in families_for(OP):
        names = [i.name for i in family.instances(OP, "bf16")]
        assert len(names) == len(set(names)), family.name
    assert not get_family("dwsep_stream").instances(OP, "fp32")
    assert not get_family("dwsep_resident").instances(OP, "fp32")
    assert not get_family("dwsep_halo").instances(OP, "fp32")
    assert not get_family("dwsep_halo_tc").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma_resident").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma_bulk").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma_split").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma_staged").instances(OP, "fp32")
    assert not get_family("dwsep_wgmma_bulk_staged").instances(OP, "fp32")
    assert get_family("dwsep_chunked").instances(OP, "fp32")  # CUDA cores, any element type


def test_every_network_problem_is_served_by_each_family_within_shared_memory():
    problems = network_problems()
    assert len(problems) >= 250
    for name in ("dwsep_chunked", "dwsep_resident", "dwsep_stream", "dwsep_halo", "dwsep_wgmma"):
        family = get_family(name)
        for p in problems:
            served = [i for i in family.instances(OP, "bf16") if family.applicable(i, p) is None]
            assert served, f"no {name} instance serves {p.label()}"
            if name != "dwsep_chunked":
                assert max(family.shared_bytes(i.settings, p) for i in served) <= SMEM_OPT_IN


def test_halo_tc_is_halo_with_the_tensor_core_depthwise_and_its_padded_halo():
    halo, tc = get_family("dwsep_halo"), get_family("dwsep_halo_tc")
    settings = dict(tile_h=8, tile_w=8, tile_n=64, kc=64, tiles=1)
    p = problem(C=96, K=64, H=14, W=14)
    a, b = instance("dwsep_halo", **settings), instance("dwsep_halo_tc", **settings)
    assert tc.defines(b) == {**halo.defines(a), "DW_TC": 1}
    assert "DW_TC" not in halo.defines(a)
    hh, hw = halo.halo(a.settings, p)
    stages = min(a.settings["stages"], 2)  # two chunks of 64 channels, one tile
    assert tc.shared_bytes(b.settings, p) - halo.shared_bytes(a.settings, p) == (
        stages * 2 * hh * hw * 8)  # 8 u16 more per halo pixel and stage
    assert {c["c_split"] for c in tc.configs(OP)} == {1, 2}
    five = problem(C=96, K=64, H=14, W=14, R=5, S=5, pad=2)
    assert any(tc.applicable(i, five) is None for i in tc.instances(OP, "bf16"))
    for other in (p, problem(C=96, K=64, H=14, W=14, R=5, S=5, pad=2, stride=2)):
        assert all("5x5 filters at stride 1" in tc.applicable(i, other)
                   for i in tc.instances(OP, "bf16"))


def test_wgmma_bulk_packs_the_weight_first_and_reads_the_packed_copy():
    resident, bulk = get_family("dwsep_wgmma_resident"), get_family("dwsep_wgmma_bulk")
    settings = dict(tile_p=64, tile_n=256, producers=2, stages=3, filter=3, k_blocks=1)
    p = problem(C=728, K=728, H=19, W=19, N=2)
    a, b = instance("dwsep_wgmma_resident", **settings), instance("dwsep_wgmma_bulk", **settings)
    assert bulk.defines(b) == {**resident.defines(a), "BULK": 1}
    tiles = 3 * 12  # 256-channel passes over K, 64-channel chunks of C
    assert bulk.workspace_bytes(b, p) == tiles * 256 * 128
    pack, main = bulk.launches(b, p)
    [plain] = resident.launches(a, p)
    assert pack.entry == "dwsep_wgmma_bulk_pack" and pack.args[:2] == ("w_pw", "workspace")
    assert pack.grid[0] * pack.block[0] >= tiles * 256 * 8  # a thread per 16-byte piece
    assert main.entry == "dwsep_wgmma_bulk" and main.grid == plain.grid
    assert main.args[:-1] == tuple("workspace" if x == "w_pw" else x for x in plain.args[:-1])
    assert main.shared_bytes == plain.shared_bytes + 8 + 8 * 3  # the stages' mbarriers


def test_the_rules_name_what_they_refuse():
    resident, stream = get_family("dwsep_resident"), get_family("dwsep_stream")
    wide = problem(C=2048, K=2048, H=10, W=10)
    big_tile = instance("dwsep_resident", tile_p=64, tile_n=128, kc=64, k_blocks=1)
    assert "shared memory" in resident.applicable(big_tile, wide)
    assert resident.applicable(instance("dwsep_resident", tile_p=16, k_blocks=1), wide) is None
    assert "k_blocks" in resident.applicable(
        instance("dwsep_resident", tile_n=128, k_blocks=4), problem(K=256))
    split8 = instance("dwsep_stream", kc=64, c_split=8)
    assert "c_split=8" in stream.applicable(split8, problem(C=64))  # one chunk, eight blocks
    tiles4 = instance("dwsep_stream", tile_p=32, tiles=4)
    assert "staged taps" in stream.applicable(tiles4, problem(C=30, N=8))  # C not a multiple of 8
    assert "staged taps" in stream.applicable(tiles4, problem(multiplier=2, N=8))
    assert stream.applicable(tiles4, problem(N=8)) is None
    halo = get_family("dwsep_halo")
    square = instance("dwsep_halo", tile_h=8, tile_w=8, tiles=1)
    assert "multiplier 1" in halo.applicable(square, problem(multiplier=2))
    assert "multiple of 8" in halo.applicable(square, problem(C=60))
    wide = instance("dwsep_halo", tile_h=2, tile_w=32, tiles=1)
    assert "tile_w=32" in halo.applicable(wide, problem(H=7, W=7))
    assert halo.applicable(wide, problem(H=7, W=17)) is None
    assert "one block" in halo.applicable(instance("dwsep_halo", tile_h=8, tile_w=8, tiles=4),
                                          problem(H=14, W=14))  # 2 x 2 tiles


def test_each_stream_instance_serves_one_filter_case_and_read_path():
    """dwsep_stream compiles each configuration per filter case (3, 5, any other) and read path
    (staged taps or the cache): a problem meets one case, so it keeps one candidate per
    configuration, and the others name the case that serves it."""
    stream = get_family("dwsep_stream")
    instances = stream.instances(OP, "bf16")
    def key(i):
        return tuple(sorted((k, v) for k, v in i.settings.items() if k not in ("filter", "staged")))

    configs = {key(i) for i in instances}
    cases = [problem(N=8), problem(N=8, R=5, S=5, pad=2), problem(N=8, R=7, S=7, pad=3),
             problem(N=8, R=3, S=5, pad=1), problem(N=8, C=30), problem(N=8, multiplier=2),
             problem(N=8, C=30, R=5, S=5, pad=2)]
    for p in cases:
        served = [i for i in instances if stream.applicable(i, p) is None]
        staged = p.multiplier == 1 and p.C % 8 == 0
        assert {i.settings["staged"] for i in served} == {int(staged)}, p.label()
        assert {i.settings["filter"] for i in served} == {p.R if p.R == p.S and p.R in (3, 5)
                                                          else 0}, p.label()
        # a configuration once at most: the problem has no more candidates than before
        served_configs = [key(i) for i in served]
        assert served and len(set(served_configs)) == len(served_configs) <= len(configs)
    three = instance("dwsep_stream", filter=3, staged=1, tiles=1, c_split=1)
    assert "filter=5" in stream.applicable(three, cases[1])
    assert "filter=0" in stream.applicable(three, cases[2])
    cached = instance("dwsep_stream", filter=3, staged=0)
    assert "staged=1" in stream.applicable(cached, cases[0])
    assert "staged taps" in stream.applicable(three, cases[4])


def test_two_blocks_a_multiprocessor_only_for_eight_warps_and_where_shared_memory_allows():
    for name in ("dwsep_resident", "dwsep_stream", "dwsep_halo"):
        for i in get_family(name).instances(OP, "bf16"):
            c = i.settings
            warps = c["warps_m"] * c["warps_n"]
            tile_p = c.get("tile_p") or c["tile_h"] * c["tile_w"]
            two = warps == 8 and tile_p * c["tile_n"] <= 32 * 32 * warps
            assert c["occ"] in ((1, 2) if two else (1,)), i.name
    assert any(i.settings["occ"] == 2 for i in get_family("dwsep_stream").instances(OP, "bf16"))
    halo = get_family("dwsep_halo")
    big = dict(tile_h=8, tile_w=8, tile_n=128, kc=64, stages=4, tiles=8)
    p = problem(N=32, C=256, H=56, W=56, K=256, R=5, S=5, pad=2)
    assert halo.applicable(instance("dwsep_halo", **big, occ=1), p) is None
    assert "occ=2" in halo.applicable(instance("dwsep_halo", **big, occ=2), p)
    small = dict(tile_h=8, tile_w=8, tile_n=128, kc=32, stages=2, tiles=1)
    assert halo.applicable(instance("dwsep_halo", **small, occ=2), p) is None
    resident = get_family("dwsep_resident")
    layout = dict(tile_p=64, tile_n=128, warps_m=2, warps_n=4, kc=32, k_blocks=1, occ=2)
    assert resident.applicable(instance("dwsep_resident", **layout), problem(C=256)) is None
    assert "occ=2" in resident.applicable(instance("dwsep_resident", **layout), problem(C=728))


def test_an_instance_that_serves_a_problem_is_of_its_compiled_case():
    """compiled_case is a necessary condition of the rules (the selector skips the other
    cases' candidates before asking the rules): over the network problems, every applicable
    instance's config holds the problem's case."""
    problems = network_problems()[::7] + [problem(R=7, S=7, pad=3), problem(R=5, S=3, pad=1),
                                          problem(C=60), problem(multiplier=2)]
    for family in families_for(OP):
        instances = family.instances(OP, "bf16")
        for p in problems:
            case = family.compiled_case(p)
            for i in instances:
                if family.applicable(i, p) is None:
                    assert all(i.settings[k] == v for k, v in case.items()), (i.name, p.label())
    assert get_family("dwsep_stream").compiled_case(problem(R=5, S=5, pad=2, C=60)) == {
        "filter": 5, "staged": 0}
    assert get_family("dwsep_wgmma_split").compiled_case(problem(R=7, S=7, pad=3)) == {
        "filter": 0}
    assert get_family("dwsep_halo").compiled_case(problem()) == {}


def test_launch_geometry():
    p = problem(N=2, C=96, H=15, W=13, K=200, stride=2)  # 2 x 8 x 7 = 112 pixels
    [launch] = get_family("dwsep_stream").launches(
        instance("dwsep_stream", tile_p=16, tile_n=64, c_split=2, kc=32), p)
    assert launch.grid == (7, 4, 2) and launch.block == (128, 1, 1)
    [launch] = get_family("dwsep_stream").launches(
        instance("dwsep_stream", tile_p=32, tile_n=64, tiles=4), p)
    assert launch.grid == (1, 4, 1)
    [launch] = get_family("dwsep_resident").launches(
        instance("dwsep_resident", tile_p=16, tile_n=64, k_blocks=2, kc=32), p)
    assert launch.grid == (7, 2, 1)
    assert launch.shared_bytes == 2 * 16 * (96 + 8) + 2 * 3 * 64 * 40 + 12 * 16
    halo = get_family("dwsep_halo")
    square = instance("dwsep_halo", tile_h=8, tile_w=8, tile_n=64, kc=32, tiles=1)
    assert halo.applicable(square, p) is None
    [launch] = halo.launches(square, p)
    assert launch.grid == (2, 4, 1)  # one 8 x 8 tile per image
    halo_pixels = (7 * 2 + 3) ** 2  # the input under an 8 x 8 tile at stride 2
    assert launch.shared_bytes == 2 * 64 * 40 + 2 * 2 * (64 * 40 + halo_pixels * 32)
    split = instance("dwsep_halo", tile_h=8, tile_w=8, tile_n=64, kc=32, c_split=2)
    [launch] = halo.launches(split, p)
    assert launch.grid == (2, 4, 2)  # the cluster's two blocks along z share a tile
    assert launch.shared_bytes == max(2 * 64 * 40 + 2 * 2 * (64 * 40 + halo_pixels * 32),
                                      4 * 64 * (64 + 4))  # the pipeline or the partial sums
    assert "c_split=2" in halo.applicable(split, problem(C=32))  # one chunk, two blocks
    p = problem(N=2, C=96, H=40, W=40, K=64)  # 5 x 5 tiles of 8 x 8 per image, 4 per block
    [launch] = halo.launches(instance("dwsep_halo", tile_h=8, tile_w=8, tile_n=64, tiles=4), p)
    assert launch.grid == (13, 1, 1)


def test_wgmma_serves_one_filter_case_with_whole_16_byte_rows():
    wgmma = get_family("dwsep_wgmma")
    instances = wgmma.instances(OP, "bf16")
    assert {i.settings["kc"] for i in instances} == {64}
    assert all(i.settings["warps_m"] * 16 == i.settings["tile_p"] for i in instances)
    for p, case in ((problem(N=8), 3), (problem(N=8, R=5, S=5, pad=2), 0),
                    (problem(N=8, R=3, S=5, pad=1), 0)):
        served = [i for i in instances if wgmma.applicable(i, p) is None]
        assert served and {i.settings["filter"] for i in served} == {case}, p.label()
        assert len(served) == len(instances) // 2
    three = instance("dwsep_wgmma", filter=3)
    assert "filter=0" in wgmma.applicable(three, problem(R=7, S=7, pad=3))
    assert "multiple of 8" in wgmma.applicable(three, problem(C=60))
    assert "multiplier 1" in wgmma.applicable(three, problem(multiplier=2))
    p = problem(N=2, C=200, H=15, W=13, K=300, stride=2)  # 2 x 8 x 7 = 112 pixels
    [launch] = wgmma.launches(
        instance("dwsep_wgmma", tile_p=64, tile_n=128, producers=1, stages=2), p)
    assert launch.grid == (2, 3, 1) and launch.block == (256, 1, 1)  # a consumer, a producer
    assert launch.shared_bytes == 1024 + 128 * 2 * (64 + 128) + 12 * 64
    [launch] = wgmma.launches(
        instance("dwsep_wgmma", tile_p=128, tile_n=256, producers=1, stages=4), p)
    assert launch.block == (384, 1, 1) and launch.shared_bytes <= SMEM_OPT_IN
    # 512 output channels: two consumers share the A tile of 64 pixels
    [launch] = wgmma.launches(
        instance("dwsep_wgmma", tile_p=64, tile_n=512, producers=1, stages=3), p)
    assert launch.grid == (2, 1, 1) and launch.block == (384, 1, 1)
    assert launch.shared_bytes == 1024 + 128 * 3 * (64 + 512) + 12 * 64 <= SMEM_OPT_IN
    # at most 384 threads: 168 registers each, room for 256 accumulator columns
    assert max(wgmma.threads(i.settings) for i in instances) == 384


def test_wgmma_split_divides_the_chunks_over_a_cluster_where_few_blocks_would_run():
    split = get_family("dwsep_wgmma_split")
    instances = split.instances(OP, "bf16")
    assert {i.settings["c_split"] for i in instances} == {2, 4, 8}
    assert split.source_file == get_family("dwsep_wgmma").source_file
    one = instance("dwsep_wgmma_split", tile_p=64, tile_n=256, producers=2, stages=2, c_split=4)
    assert split.defines(one)["C_SPLIT"] == 4 and "C_SPLIT" not in get_family(
        "dwsep_wgmma").defines(instance("dwsep_wgmma"))
    p = problem(N=32, C=1024, H=7, W=7, K=1024)  # 1,568 pixels: 25 x 4 blocks unsplit
    assert split.applicable(one, p) is None
    [launch] = split.launches(one, p)
    assert launch.grid == (25, 4, 4) and launch.block == (384, 1, 1)
    assert launch.shared_bytes == 1024 + 128 * 2 * (64 + 256) + 12 * 64
    # the partial sums (128 x (256 + 8) floats) outgrow two stages of 128 + 256 rows
    [launch] = split.launches(instance("dwsep_wgmma_split", tile_p=128, tile_n=256, stages=2), p)
    assert launch.shared_bytes == 1024 + 4 * 128 * (256 + 8) + 12 * 128 <= SMEM_OPT_IN
    assert "two waves" in split.applicable(one, problem(N=32, C=1024, H=14, W=14, K=1024))
    assert "c_split=8" in split.applicable(
        instance("dwsep_wgmma_split", c_split=8), problem(C=448))  # 7 chunks for 8 blocks
    assert "filter=0" in split.applicable(
        instance("dwsep_wgmma_split", filter=3), problem(C=512, R=5, S=5, pad=2))
    # every network pair of wide C on a small map at N = 1 and 32 is served
    for q in network_problems():
        if q.MC >= 512 and q.P * q.Q <= 100 and q.N in (1, 32) and q.multiplier == 1:
            assert any(split.applicable(i, q) is None for i in instances), q.label()


def test_wgmma_cluster_shares_a_pixel_tiles_depthwise_over_its_k_blocks():
    cl, res = get_family("dwsep_wgmma_cluster"), get_family("dwsep_wgmma_resident")
    settings = dict(tile_p=64, tile_n=256, producers=2, stages=3, filter=3, k_blocks=4)
    p = problem(N=32, C=1024, H=7, W=7, K=1024)  # 1,568 pixels: 25 tiles; 4 passes of 256
    plain = instance("dwsep_wgmma_cluster", **settings, bulk=0, staged=0)
    [launch] = cl.launches(plain, p)
    assert launch.entry == "dwsep_wgmma_cluster" and launch.grid == (25, 4, 1)
    same = instance("dwsep_wgmma_resident", **settings)
    assert launch.shared_bytes == res.launches(same, p)[0].shared_bytes
    assert cl.defines(plain) == {**res.defines(same), "BULK": 0, "K_SHARE": 4, "STAGED": 0}
    assert cl.workspace_bytes(plain, p) == 0
    bulk = instance("dwsep_wgmma_cluster", **settings, bulk=1, staged=0)
    pack, main = cl.launches(bulk, p)
    assert (pack.entry, main.entry) == ("dwsep_wgmma_cluster_pack", "dwsep_wgmma_cluster")
    assert main.grid == (25, 4, 1) and main.shared_bytes == launch.shared_bytes + 8 + 8 * 3
    assert cl.workspace_bytes(bulk, p) == 4 * 16 * 256 * 128
    # one pass a block is served (the resident family refuses it), fewer passes than blocks not
    assert cl.applicable(plain, p) is None and "one pass" in res.applicable(same, p)
    assert "k_blocks=4" in cl.applicable(plain, problem(N=32, C=1024, H=7, W=7, K=768))
    assert "shared memory" in cl.applicable(plain, problem(N=4, C=2048, H=10, W=10, K=1024))
    assert {i.settings["k_blocks"] for i in cl.instances(OP, "bf16")} == {2, 4}
    # staged: the input buffers over the stages, 32 bytes more (alignment and the zero row)
    staged = instance("dwsep_wgmma_cluster", **settings, bulk=1, staged=1)
    assert cl.defines(staged)["STAGED"] == 1
    assert cl.launches(staged, p)[1].shared_bytes == main.shared_bytes + 32
    wide = problem(N=32, C=256, H=74, W=74, K=1024)  # 4 input rows of 74: 296 pixels
    stages = settings["stages"] * settings["tile_n"] * 128
    three = 3 * DwsepWgmmaStaged.input_buffer_bytes(staged.settings, wide)
    assert three > stages and "do not fit" in cl.applicable(staged, wide)
    assert cl.applicable(instance("dwsep_wgmma_cluster", **settings, bulk=1, staged=0),
                         wide) is None
    for q in (p, problem(N=32, C=728, H=19, W=19, K=1024), problem(N=2, C=512, H=37, W=37,
                                                                     K=1024, stride=2)):
        fits = 3 * DwsepWgmmaStaged.input_buffer_bytes(staged.settings, q) <= stages
        assert (cl.applicable(staged, q) is None) == fits, q.label()


def test_wgmma_ring_shares_each_chunk_over_a_cluster_of_channel_tiles():
    ring = get_family("dwsep_wgmma_ring")
    settings = dict(tile_p=64, tile_n=256, producers=2, stages=3, a_stages=8, filter=3,
                    k_share=4)
    one = instance("dwsep_wgmma_ring", **settings)
    p = problem(N=32, C=1536, H=10, W=10, K=2048)  # 50 pixel tiles, 8 channel tiles, 24 chunks
    pack, main = ring.launches(one, p)
    assert (pack.entry, main.entry) == ("dwsep_wgmma_ring_pack", "dwsep_wgmma_ring")
    assert main.grid == (50, 8, 1) and main.block == (384, 1, 1)
    assert "workspace" in main.args and "w_pw" not in main.args
    assert ring.workspace_bytes(one, p) == 8 * 24 * 256 * 128
    # any C: no resident tile, only the stages and three staged input buffers
    buffers = 3 * DwsepWgmmaStaged.input_buffer_bytes(one.settings, p)
    assert main.shared_bytes == (1024 + (3 * 256 + 8 * 64) * 128 + 12 * 64 + 8 + 8 * 19 + 16
                                 + buffers + 16)
    assert ring.applicable(one, p) is None
    assert "STAGED" not in ring.defines(one) and ring.defines(one)["K_SHARE"] == 4
    # the last cluster is padded past K: 3 channel tiles of 256 make a cluster of 4
    assert ring.launches(one, problem(N=32, C=728, H=19, W=19, K=728))[1].grid == (181, 4, 1)
    # refused: more blocks than channel tiles or chunks, another filter case, staged rows
    # that do not fit
    assert "k_share=4" in ring.applicable(one, problem(N=32, C=1536, H=10, W=10, K=768))
    assert "chunks of 64" in ring.applicable(one, problem(N=32, C=192, H=10, W=10, K=2048))
    assert "filter=3" in ring.applicable(one, problem(N=32, C=1536, H=10, W=10, K=2048, R=5,
                                                      S=5, pad=2))
    assert "shared memory" in ring.applicable(one, problem(N=2, C=256, H=112, W=112, K=2048))
    assert {i.settings["k_share"] for i in ring.instances(OP, "bf16")} == {2, 3, 4, 8}
    # every wide pair of the network sets (C and K from 512) is served
    for q in network_problems():
        if q.MC >= 512 and q.K >= 512 and q.multiplier == 1:
            assert any(ring.applicable(i, q) is None for i in ring.instances(OP, "bf16")), \
                q.label()


def test_staged_families_compile_3x3_and_5x5_for_the_tensor_cores():
    """dwsep_wgmma_staged and dwsep_wgmma_bulk_staged compile per filter case 3, 5 or 0 (any
    other size, on the CUDA cores); the 5x5 case stages 64 x 25 taps before its rows."""
    p5 = problem(N=2, C=128, H=14, W=14, K=512, R=5, S=5, pad=2)
    p7 = problem(N=2, C=128, H=14, W=14, K=512, R=7, S=7, pad=3)
    assert DwsepWgmmaStaged.param_bytes({"filter": 5}) == 2 * (64 * 25 + 128) == 3456
    assert DwsepWgmmaStaged.param_bytes({"filter": 0}) == 0
    for name in ("dwsep_wgmma_staged", "dwsep_wgmma_bulk_staged"):
        f = get_family(name)
        assert {i.settings["filter"] for i in f.instances(OP, "bf16")} == {3, 5, 0}
        extra = {"k_blocks": 1} if "bulk" in name else {}
        five = instance(name, tile_p=64, tile_n=128, stages=4, filter=5, **extra)
        other = instance(name, tile_p=64, tile_n=128, stages=4, filter=0, **extra)
        assert f.defines(five)["FILTER"] == 5 and f.compiled_case(p5) == {"filter": 5}
        assert f.applicable(five, p5) is None and "need filter=5" in f.applicable(other, p5)
        assert f.applicable(other, p7) is None and "need filter=0" in f.applicable(five, p7)
        assert "need filter=0" in f.applicable(five, problem(C=128, K=512, R=5, S=3, pad=1))


def test_wgmma_split_staged_splits_the_staged_pipeline_over_a_cluster():
    """dwsep_wgmma_split_staged: dwsep_wgmma_split's grid and partial sums with the staged
    producers (C_SPLIT and STAGED), its input buffers after the split's shared memory, and the
    tensor-core filter cases of the staged families."""
    ss, split = get_family("dwsep_wgmma_split_staged"), get_family("dwsep_wgmma_split")
    p = problem(N=32, C=1152, H=7, W=7, K=192, R=5, S=5, pad=2)  # 1,568 pixels: 25 tiles
    i = instance("dwsep_wgmma_split_staged", tile_n=64, stages=3, filter=5, c_split=4)
    [launch] = ss.launches(i, p)
    assert launch.entry == "dwsep_wgmma_split_staged" and launch.grid == (25, 3, 4)
    assert ss.defines(i)["C_SPLIT"] == 4 and ss.defines(i)["STAGED"] == 1
    assert launch.shared_bytes == (split.shared_bytes(i.settings, None) + 16
                                   + 2 * DwsepWgmmaStaged.input_buffer_bytes(i.settings, p))
    assert ss.applicable(i, p) is None
    assert "need filter=3" in ss.applicable(i, problem(N=32, C=1152, H=7, W=7, K=192))
    assert "c_split=4" in ss.applicable(i, problem(N=32, C=192, H=7, W=7, K=192, R=5, S=5,
                                                   pad=2))  # 3 chunks for 4 blocks
    assert "two waves" in ss.applicable(i, problem(N=32, C=1152, H=28, W=28, K=192, R=5, S=5,
                                                   pad=2))
    wide = problem(N=1, C=128, H=224, W=224, K=64, R=5, S=5, pad=2)  # 8 rows of 224 pixels
    assert "shared memory" in ss.applicable(
        instance("dwsep_wgmma_split_staged", tile_n=256, stages=4, filter=5, c_split=2), wide)


def rows_read(c, p) -> int:
    """The input rows (n * H + h) the pixel tiles of `p` read at most, tile by tile."""
    most, pixels = 0, p.N * p.P * p.Q
    for pix0 in range(0, pixels, c["tile_p"]):
        ends = []
        for pix in range(pix0, min(pix0 + c["tile_p"], pixels)):
            n, oh = divmod(pix // p.Q, p.P)
            ends.append(n * p.H + oh * p.stride - p.pad)
        most = max(most, max(ends) - min(ends) + p.R)
    return most


@pytest.mark.parametrize("fields", [
    dict(N=4, C=64, H=19, W=19, K=64, pad=1), dict(N=5, C=64, H=7, W=6, K=40, pad=0),
    dict(N=3, C=64, H=13, W=11, K=90, stride=2, pad=1), dict(N=6, C=64, H=3, W=3, K=8, pad=0),
    dict(N=2, C=64, H=9, W=9, K=8, R=5, S=5, pad=0), dict(N=9, C=64, H=2, W=5, K=8, pad=1),
    dict(N=4, C=64, H=10, W=10, K=8, R=7, S=7, stride=2, pad=1),
])
def test_wgmma_staged_holds_every_input_row_its_tiles_read(fields):
    """staged_rows (the kernel's buffer size) is at least the rows a tile reads, also where a
    tile spans images whose windows skip rows (no padding) and at stride 2."""
    family, p = get_family("dwsep_wgmma_staged"), problem(**fields)
    for tile_p in (64, 128):
        c = dict(tile_p=tile_p)
        assert rows_read(c, p) <= family.staged_rows(c, p) <= rows_read(c, p) + p.R


def test_wgmma_staged_is_refused_where_its_input_rows_do_not_fit():
    family = get_family("dwsep_wgmma_staged")
    i = instance("dwsep_wgmma_staged", tile_p=64, tile_n=256, producers=2, stages=4, filter=3)
    assert family.applicable(i, problem(N=32, C=728, H=19, W=19, K=728)) is None
    why = family.applicable(i, problem(N=32, C=64, H=147, W=147, K=128, stride=2))
    assert why and "staged input rows" in why and "shared memory" in why
    need = family.shared_bytes(i.settings, problem(N=32, C=728, H=19, W=19, K=728))
    assert need == family.shared_bytes(i.settings, None) + 3 * (1408 + 7 * 19 * 144)
    assert family.defines(i)["STAGED"] == 1 and i.name.startswith("wgmma_staged_")


def test_wgmma_bulk_staged_is_bulk_with_three_staged_input_buffers():
    bulk, staged = get_family("dwsep_wgmma_bulk"), get_family("dwsep_wgmma_bulk_staged")
    settings = dict(tile_p=64, tile_n=128, producers=2, stages=3, filter=3, k_blocks=1)
    a, b = instance("dwsep_wgmma_bulk", **settings), instance("dwsep_wgmma_bulk_staged", **settings)
    p = problem(N=32, C=728, H=19, W=19, K=728)
    rows = get_family("dwsep_wgmma_staged").staged_rows(b.settings, p)
    assert staged.shared_bytes(b.settings, p) == (
        bulk.shared_bytes(a.settings, p) + 16 + 3 * (1408 + rows * 19 * 144) + 16)
    assert staged.defines(b) == {**bulk.defines(a), "STAGED": 1}
    pack, main = staged.launches(b, p)
    assert (pack.entry, main.entry) == ("dwsep_wgmma_bulk_staged_pack", "dwsep_wgmma_bulk_staged")
    assert staged.applicable(b, p) is None
    # a resident tile that fits alone may leave no room for the staged rows
    wide = problem(N=32, C=1536, H=10, W=10, K=2048)
    assert "shared memory" in staged.applicable(
        instance("dwsep_wgmma_bulk_staged", tile_p=64, tile_n=128, stages=2, filter=3), wide)


def test_wgmma_resident_keeps_the_depthwise_tile_of_every_channel_and_needs_passes():
    res = get_family("dwsep_wgmma_resident")
    instances = res.instances(OP, "bf16")
    assert {i.settings["producers"] for i in instances} == {1, 2}  # 8 or 16 rows a pass
    small = instance("dwsep_wgmma_resident", tile_p=64, tile_n=128, producers=2, stages=3,
                     filter=3, k_blocks=1)
    p = problem(N=4, C=728, H=19, W=19, K=728)  # 1,444 pixels: 23 tiles of 64; 6 passes
    [launch] = res.launches(small, p)
    assert launch.grid == (23, 1, 1) and launch.block == (384, 1, 1)
    # the weight's stages, then A: 12 chunks of 64 channels x 64 rows of 128 bytes
    assert launch.shared_bytes == 1024 + 128 * (3 * 128 + 12 * 64) + 12 * 64
    shared = instance("dwsep_wgmma_resident", tile_p=64, tile_n=128, producers=2, stages=3,
                      filter=3, k_blocks=4)
    [launch] = res.launches(shared, p)
    assert launch.grid == (23, 4, 1)  # four blocks share a pixel tile's six passes
    assert res.defines(shared) == res.defines(small)  # one code object
    assert "one pass" in res.applicable(small, problem(N=4, C=728, H=19, W=19, K=128))
    assert "k_blocks=4" in res.applicable(shared, problem(N=4, C=728, H=19, W=19, K=384))
    assert "shared memory" in res.applicable(small, problem(N=4, C=2048, H=10, W=10, K=512))
    assert "filter=0" in res.applicable(small, problem(N=4, C=728, R=5, S=5, pad=2, K=728))
    assert "multiple of 8" in res.applicable(small, problem(C=60, K=728))
    # every network pair wide enough for two passes of 128 and narrow enough for A is served
    for q in network_problems():
        if q.K > 128 and q.MC <= 1024 and q.multiplier == 1 and q.C % 8 == 0:
            assert any(res.applicable(i, q) is None for i in instances), q.label()


@pytest.mark.parametrize("family,settings", [
    ("dwsep_resident", dict(tile_p=64, tile_n=256, warps_m=2, kc=64)),
    ("dwsep_resident", dict(tile_p=64, tile_n=256, warps_m=4, warps_n=4, kc=64)),  # 16 warps
    ("dwsep_stream", dict(tile_p=128, tile_n=128, kc=64, stages=3, c_split=2)),
    ("dwsep_stream", dict(tile_p=64, tile_n=128, kc=32, tiles=4)),
    ("dwsep_halo", dict(tile_h=2, tile_w=32, tile_n=256, kc=64, tiles=4)),
    ("dwsep_halo", dict(tile_h=8, tile_w=16, tile_n=128, kc=64, tiles=4)),
    ("dwsep_halo", dict(tile_h=8, tile_w=16, tile_n=128, kc=64, c_split=8)),
    ("dwsep_halo_tc", dict(tile_h=2, tile_w=32, tile_n=256, kc=64, tiles=4)),
    ("dwsep_halo_tc", dict(tile_h=8, tile_w=16, tile_n=128, kc=64, c_split=2)),
    ("dwsep_wgmma", dict(tile_p=128, tile_n=256, producers=1, stages=4, filter=3)),
    ("dwsep_wgmma", dict(tile_p=64, tile_n=256, producers=1, stages=4, filter=0)),
    ("dwsep_wgmma", dict(tile_p=64, tile_n=512, producers=1, stages=3, filter=3)),
    ("dwsep_wgmma", dict(tile_p=64, tile_n=128, producers=1, stages=2, filter=3)),  # 2 a SM
    ("dwsep_wgmma_split", dict(tile_p=128, tile_n=256, producers=1, stages=3, filter=3,
                               c_split=8)),
    ("dwsep_wgmma_split", dict(tile_p=64, tile_n=256, producers=2, stages=3, filter=0,
                               c_split=2)),
    ("dwsep_wgmma_split_staged", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=5,
                                      c_split=8)),
    ("dwsep_wgmma_staged", dict(tile_p=128, tile_n=256, producers=1, stages=4, filter=3)),
    ("dwsep_wgmma_staged", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=0)),
    ("dwsep_wgmma_staged", dict(tile_p=64, tile_n=256, producers=1, stages=4, filter=5)),
    ("dwsep_wgmma_resident", dict(tile_p=128, tile_n=256, producers=1, stages=2, filter=3)),
    ("dwsep_wgmma_resident", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=3)),
    ("dwsep_wgmma_resident", dict(tile_p=64, tile_n=128, producers=2, stages=6, filter=0)),
    ("dwsep_wgmma_bulk", dict(tile_p=128, tile_n=256, producers=1, stages=2, filter=3)),
    ("dwsep_wgmma_bulk", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=3)),
    ("dwsep_wgmma_bulk_staged", dict(tile_p=128, tile_n=256, producers=1, stages=2, filter=3)),
    ("dwsep_wgmma_bulk_staged", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=0)),
    ("dwsep_wgmma_bulk_staged", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=5)),
    ("dwsep_wgmma_cluster", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=3,
                                 k_blocks=4, bulk=1, staged=0)),
    ("dwsep_wgmma_cluster", dict(tile_p=64, tile_n=128, producers=2, stages=6, filter=0,
                                 k_blocks=2, bulk=0, staged=0)),
    ("dwsep_wgmma_cluster", dict(tile_p=64, tile_n=256, producers=2, stages=4, filter=3,
                                 k_blocks=4, bulk=1, staged=1)),
    ("dwsep_wgmma_cluster", dict(tile_p=64, tile_n=128, producers=2, stages=6, filter=0,
                                 k_blocks=2, bulk=0, staged=1)),
    ("dwsep_wgmma_ring", dict(tile_p=64, tile_n=256, producers=2, stages=3, a_stages=8,
                              filter=5, k_share=8)),
    ("dwsep_wgmma_ring", dict(tile_p=128, tile_n=256, producers=1, stages=3, a_stages=8,
                              filter=0, k_share=3)),
])
def test_largest_configurations_compile_without_spills(family, settings):
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    f = get_family(family)
    compiler = cuda.NvrtcCompiler()
    try:
        result = compiler.compile(f.source(), defines=f.defines(instance(family, **settings)),
                                  target="sm_90a", timeout_s=600)
    finally:
        compiler.close()
    assert result.ok, result.log[-3000:]
    if result.resources.get("registers") is not None:
        assert not result.resources.get("spill_bytes"), result.resources
    # the accumulators stay with the matrix instructions while they run
    assert "serialized" not in result.log, result.log[-3000:]
