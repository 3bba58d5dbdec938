"""conv_stem without a GPU: its configurations, the compiled case and rules, the launches'
geometry and shared memory, its rule key, and its code objects compiled with NVRTC. The GPU
check is tests/test_stem_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.stem import BLOCKS_PER_SM, FAMILY, SHARED_LIMIT, filter_bytes
from kernels.family import SM_COUNT


def stem(dtype="bf16", op="conv2d_bwd_data", **shape):
    base = dict(N=32, C=3, K=64, G=1, H=224, W=224, R=7, S=7, stride_h=2, stride_w=2,
                pad_h=3, pad_w=3)
    return ConvProblem(op=op, dtype=dtype, **{**base, **shape})


def test_configurations_cover_one_to_four_input_channels_forward_and_backward_data():
    instances = FAMILY.instances("conv2d_bwd_data", "bf16")
    assert {i.settings["cg"] for i in instances} == {1, 2, 3, 4}
    assert len(instances) == 176 and len(FAMILY.instances("conv2d_bwd_data", "fp32")) == 176
    assert {i.settings["patch"] for i in instances} == {0, 2, 4}
    forward = FAMILY.instances("conv2d_fwd", "bf16")
    assert len(forward) == 48 and {i.settings["kt"] for i in forward} == {8, 16, 32}
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    assert FAMILY.compiled_case(stem()) == {"cg": 3}


def test_rules():
    served = [i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
              if FAMILY.applicable(i, stem()) is None]
    assert {i.settings["cg"] for i in served} == {3} and len(served) == 36  # no patch stem
    other = FAMILY.instances("conv2d_bwd_data", "bf16")[0]  # cg 1
    assert "compiled for C/G=1" in FAMILY.applicable(other, stem())
    wide = stem(C=8, K=64)
    assert all("C/G up to 4" in FAMILY.applicable(i, wide)
               for i in FAMILY.instances("conv2d_bwd_data", "bf16"))
    vector = next(i for i in served if i.settings["vector"])
    assert "multiples of 8" in FAMILY.applicable(vector, stem(K=60))
    vector32 = next(i for i in FAMILY.instances("conv2d_bwd_data", "fp32")
                    if i.settings == vector.settings)
    assert FAMILY.applicable(vector32, stem(K=60, dtype="fp32")) is None  # 4 channels a load
    scalar = next(i for i in served if not i.settings["vector"])
    assert FAMILY.applicable(scalar, stem(K=60)) is None
    big = stem(K=256, R=11, S=11, pad_h=5, pad_w=5)
    assert filter_bytes(scalar.settings, big) > SHARED_LIMIT
    assert "shared memory" in FAMILY.applicable(scalar, big)
    fwd = ConvProblem(op="conv2d_fwd", dtype="bf16", N=1, C=3, K=8, G=1, H=8, W=8, R=3, S=3)
    assert "problem is conv2d_fwd" in FAMILY.applicable(scalar, fwd)


def test_forward_rules_and_launch():
    p = stem(op="conv2d_fwd", K=40)
    served = [i for i in FAMILY.instances("conv2d_fwd", "bf16") if FAMILY.applicable(i, p) is None]
    assert {(i.settings["kt"], i.settings["vector"]) for i in served} == {
        (kt, v) for kt in (8, 16, 32) for v in (0, 1)}
    vector = next(i for i in served if i.settings["vector"] and i.settings["kt"] == 16)
    assert "vector=1 stores 8 channels" in FAMILY.applicable(vector, stem(op="conv2d_fwd", K=36))
    [launch] = FAMILY.launches(vector, p)
    assert launch.entry == "stem_fwd" and launch.args[:3] == ("x", "w", "y")
    pixels = 32 * 112 * 112
    assert launch.grid == (min(-(-pixels // vector.settings["block"]),
                               -(-SM_COUNT * BLOCKS_PER_SM // 3)), 3, 1)  # 40 channels by 16
    assert launch.shared_bytes == 4 * 7 * 7 * 3 * 16
    wide = stem(op="conv2d_fwd", R=11, S=11, pad_h=5, pad_w=5, C=4)
    by_kt = {i.settings["kt"]: FAMILY.applicable(i, wide)
             for i in FAMILY.instances("conv2d_fwd", "bf16") if i.settings["cg"] == 4}
    assert by_kt[8] is None and "shared memory" in by_kt[32]  # 11 x 11 x 4 x 32 floats


def test_launch_geometry_classes_groups_and_the_filter_in_shared_memory():
    p = stem(N=1)
    inst = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
                if FAMILY.applicable(i, p) is None and i.settings["pix"] == 2
                and i.settings["block"] == 256 and i.settings["lanes"] == 4)
    [launch] = FAMILY.launches(inst, p)
    assert launch.entry == "stem_bwd_data" and launch.args[:3] == ("dy", "w", "dx")
    items = 1 * 56 * 112  # the largest class: 112 rows in groups of 2, 112 columns
    assert launch.grid == (min(-(-items // 64), -(-SM_COUNT * BLOCKS_PER_SM // 4)), 4, 1)
    assert launch.block == (256, 1, 1)
    assert launch.shared_bytes == 4 * 7 * 7 * 64 * 3
    grouped = stem(C=8, K=32, G=4, stride_h=4, stride_w=4, R=4, S=4, pad_h=0, pad_w=0)
    inst2 = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
                 if FAMILY.applicable(i, grouped) is None)
    assert FAMILY.launches(inst2, grouped)[0].grid[1:] == (16, 4)


def test_rule_key_separates_what_the_rules_read():
    from kernels.conv.rulekeys import KEYS

    key = KEYS["conv_stem"](FAMILY, FAMILY.instances("conv2d_bwd_data", "bf16"),
                            "conv2d_bwd_data")
    assert key(stem()) == key(stem(N=8, H=192, W=192))
    assert key(stem()) != key(stem(K=60)) != key(stem(C=4))
    assert key(stem(C=16)) is None
    forward = KEYS["conv_stem"](FAMILY, FAMILY.instances("conv2d_fwd", "bf16"), "conv2d_fwd")
    p = stem(op="conv2d_fwd", R=11, S=11, pad_h=5, pad_w=5, C=4)
    assert forward(p) != forward(stem(op="conv2d_fwd", C=4))  # kt 32's filter no longer fits


def test_code_objects_compile_with_nvrtc():
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    compiler = cuda.NvrtcCompiler()
    for dtype in ("bf16", "fp32"):
        for inst in (FAMILY.instances("conv2d_bwd_data", dtype)[::7]
                     + FAMILY.instances("conv2d_fwd", dtype)[::5]):
            result = compiler.compile(FAMILY.source(), defines=FAMILY.defines(inst),
                                      target="sm_80", timeout_s=300)
            assert result.ok, result.log[-1500:]


def test_leaves_narrow_output_groups_to_the_depthwise_and_grouped_families():
    for shape in (dict(C=32, K=32, G=32), dict(C=128, K=128, G=32), dict(C=12, K=12, G=4)):
        p = stem(**shape)
        assert all(FAMILY.applicable(i, p) for i in FAMILY.instances("conv2d_bwd_data", "bf16"))
    assert any(FAMILY.applicable(i, stem(C=12, K=32, G=4)) is None
               for i in FAMILY.instances("conv2d_bwd_data", "bf16"))


def test_the_patch_kernel_serves_patch_stems_only():
    p = stem(R=4, S=4, stride_h=4, stride_w=4, pad_h=0, pad_w=0, K=96)
    patch4 = [i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
              if i.settings["patch"] == 4 and i.settings["cg"] == 3]
    assert all(FAMILY.applicable(i, p) is None for i in patch4)
    [launch] = FAMILY.launches(patch4[0], p)
    assert launch.entry == "stem_bwd_data_patches" and launch.grid[1:] == (1, 1)
    assert launch.shared_bytes == 4 * 96 * 4 * 4 * 3
    for other in (dict(H=222, W=222), dict(pad_h=1, pad_w=1, H=222, W=222), dict(stride_h=2),
                  dict(R=3, S=3)):
        q = stem(**{**dict(R=4, S=4, stride_h=4, stride_w=4, pad_h=0, pad_w=0), **other})
        assert all("patch=4 serves" in FAMILY.applicable(i, q) for i in patch4)
    patch2 = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
                  if i.settings["patch"] == 2 and i.settings["cg"] == 3)
    assert "patch=2 serves" in FAMILY.applicable(patch2, p)
