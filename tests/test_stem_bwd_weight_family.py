"""conv_stem_bwd_weight without a GPU: its configurations, rules, launches (the workspace's
zero, the kernel's grid and shared memory, the conversion), its rule key, and its code objects
compiled with NVRTC. The GPU check is tests/test_stem_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.stem_bwd_weight import FAMILY, WIDEST_BLOCK, columns
from kernels.family import SM_COUNT


def stem(dtype="bf16", **shape):
    base = dict(N=32, C=3, K=64, G=1, H=224, W=224, R=7, S=7, stride_h=2, stride_w=2,
                pad_h=3, pad_w=3)
    return ConvProblem(op="conv2d_bwd_weight", dtype=dtype, **{**base, **shape})


def served(p):
    return [i for i in FAMILY.instances(p.op, p.dtype) if FAMILY.applicable(i, p) is None]


def test_configurations_bf16_and_fp16_only_on_sm80_and_later():
    assert len(FAMILY.instances("conv2d_bwd_weight", "bf16")) == 180
    assert len(FAMILY.instances("conv2d_bwd_weight", "fp16")) == 180
    assert FAMILY.instances("conv2d_bwd_weight", "fp32") == []
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.unsupported_target("sm_90a") is None
    assert "sm_80 and later" in FAMILY.unsupported_target("sm_75")
    assert "sm_80 and later" in FAMILY.unsupported_target("gfx942")


def test_rules_stems_only_and_blocks_that_leave_no_warp_idle():
    p = stem()  # 147 columns: only blocks of 160 read dy once
    assert columns(p) == 147
    widths = {8 * i.settings["nt"] * i.settings["wn"] for i in served(p)}
    assert widths == {WIDEST_BLOCK} and len(served(p)) == 3 * 2 * 2  # mt, wp, tiles
    small = stem(R=3, S=3, pad_h=1, pad_w=1, K=32)  # 27 columns, 32 channels
    for inst in served(small):
        c = inst.settings
        assert (c["wn"] - 1) * 8 * c["nt"] < 27 and c["mt"] <= 2
    wide = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
                if i.settings["wn"] == 4 and i.settings["nt"] == 5)
    assert "a warp would have none" in FAMILY.applicable(wide, small)
    narrow = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
                  if i.settings["wn"] == 1 and i.settings["nt"] == 1)
    assert "wider blocks read dy fewer times" in FAMILY.applicable(narrow, small)
    four = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
                if i.settings["mt"] == 4 and i.settings["nt"] == 2 and i.settings["wn"] == 2)
    assert "one would be idle" in FAMILY.applicable(four, small)
    assert all("C/G=6: it serves 1 to 4" in FAMILY.applicable(i, stem(C=6))
               for i in FAMILY.instances("conv2d_bwd_weight", "bf16"))
    assert all("C/G=64" in FAMILY.applicable(i, stem(C=64, K=64))
               for i in FAMILY.instances("conv2d_bwd_weight", "bf16"))
    assert served(stem(C=512, K=512, G=32, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1))
    assert all("K/G=60 is not a multiple of 8" in FAMILY.applicable(i, stem(K=60))
               for i in FAMILY.instances("conv2d_bwd_weight", "bf16"))
    assert served(stem(C=8, K=64, G=4, R=3, S=3, pad_h=1, pad_w=1))  # grouped, 2 channels a group
    assert "problem is conv2d_fwd" in FAMILY.applicable(
        wide, ConvProblem(op="conv2d_fwd", dtype="bf16", N=1, C=3, K=8, G=1, H=8, W=8, R=3, S=3))


def test_launches_split_the_tiles_into_slices_of_the_workspace_then_add_them_up():
    p = stem()
    inst = next(i for i in served(p) if i.settings["mt"] == 4 and i.settings["tp"] == 4)
    kernel, add = FAMILY.launches(inst, p)
    n = 64 * 7 * 7 * 3
    splits, per = FAMILY.splits(inst, p)
    assert add.entry == "stem_bwd_weight_sum" and add.args == ("workspace", "dw", n, splits)
    assert FAMILY.workspace_bytes(inst, p) == 4 * n * splits
    assert kernel.entry == "stem_bwd_weight" and kernel.args[:3] == ("x", "dy", "workspace")
    tiles = 32 * 28 * 4  # 112 x 112 outputs in tiles of 4 x 32
    assert kernel.args[4] == per and splits == -(-tiles // per) and splits * per >= tiles
    # one wave: no more blocks than the multiprocessors hold at once
    assert splits <= SM_COUNT * FAMILY.blocks_per_sm(inst, p)
    assert kernel.grid == (splits, 1, 1) and splits <= SM_COUNT * 8
    assert kernel.block == (32 * inst.settings["wn"] * inst.settings["wp"], 1, 1)
    rows, row = (4 - 1) * 2 + 7, ((32 - 1) * 2 + 7) * 3
    assert kernel.shared_bytes == max(4 * (128 * 72 + -(-rows * row // 8) * 8), 4 * 64 * 160)
    grouped = stem(C=8, K=48, G=4, R=3, S=3, pad_h=1, pad_w=1)  # 2 in, 12 out: K/G not 8k
    assert not served(grouped)
    grouped = stem(C=8, K=64, G=4, R=3, S=3, pad_h=1, pad_w=1)
    inst = served(grouped)[0]
    assert FAMILY.launches(inst, grouped)[0].grid[1:] == (FAMILY.slices(inst.settings, grouped), 4)
    # groups of 16 channels by 16-byte copies: a pixel staged with 8 more elements (banks)
    wide = stem(N=32, C=512, K=512, G=32, H=14, W=14, R=3, S=3, stride_h=1, stride_w=1,
                pad_h=1, pad_w=1)
    inst = served(wide)[0]
    rows, row = FAMILY.staged(inst.settings, wide)
    assert row == ((inst.settings["tq"] - 1) + 3) * 24
    kernel, _ = FAMILY.launches(inst, wide)
    assert kernel.grid[0] * kernel.grid[2] <= SM_COUNT * FAMILY.blocks_per_sm(inst, wide)


def test_small_tiles_only_where_no_larger_one_covers_the_map_as_tightly():
    small = [i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
             if (i.settings["tp"], i.settings["tq"]) == (8, 8)]
    seven = stem(C=1024, K=1024, G=32, H=7, W=7, R=3, S=3, stride_h=1, stride_w=1, pad_h=1,
                 pad_w=1)
    fourteen = stem(C=512, K=512, G=32, H=14, W=14, R=3, S=3, stride_h=1, stride_w=1, pad_h=1,
                    pad_w=1)
    assert any(FAMILY.applicable(i, seven) is None for i in small)
    for p in (fourteen, stem()):  # refused: by this rule where no earlier one speaks
        reasons = [FAMILY.applicable(i, p) for i in small]
        assert None not in reasons and any("larger tiles cover it" in r for r in reasons)


def test_rule_key_separates_what_the_rules_read():
    from kernels.conv.rulekeys import KEYS

    key = KEYS["conv_stem_bwd_weight"](FAMILY, FAMILY.instances("conv2d_bwd_weight", "bf16"),
                                       "conv2d_bwd_weight")
    assert key(stem()) == key(stem(N=8, H=192, W=192, K=64))
    assert key(stem()) != key(stem(K=32)) != key(stem(C=4))
    assert key(stem(R=3, S=3)) != key(stem())
    assert key(stem(C=6)) is None and key(stem(K=60)) is None and key(stem(C=64)) is None
    assert key(stem(C=16)) is not None


def test_code_objects_compile_with_nvrtc():
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    compiler = cuda.NvrtcCompiler()
    for dtype, target in (("bf16", "sm_90"), ("fp16", "sm_80")):
        for inst in FAMILY.instances("conv2d_bwd_weight", dtype)[::11]:
            result = compiler.compile(FAMILY.source(), defines=FAMILY.defines(inst),
                                      target=target, timeout_s=300)
            assert result.ok, result.log[-1500:]
            if target == "sm_90":  # sm_80's ptxas keeps 128 registers and spills a few bytes
                assert result.resources["kernels"]["stem_bwd_weight"]["spill_bytes"] == 0
