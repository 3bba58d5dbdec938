"""conv_wgmma without a GPU: the configuration space, the applicability rules, the tensor maps
and persistent grids of its launches, tensor maps packed by the device, and every code object
compiled for sm_90a with NVRTC (no spills). The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from farm.launch import pack_args
from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from kernels.conv.wgmma import (FAMILY, SM_COUNT, SMEM_OPT_IN, blocks_per_sm, generate_configs,
                                shared_bytes, threads)
from kernels.family import Launch, TensorMap
from kernels.registry import get_family


def problem(op, dtype="bf16", **shape):
    base = dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype=dtype, **{**base, **shape})


def instance(op, **want):
    for inst in FAMILY.instances(op, "bf16"):
        if all(inst.settings.get(k) == v for k, v in want.items()):
            return inst
    raise LookupError(want)


@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_config_space(op):
    configs = generate_configs(op)
    names = [i.name for i in FAMILY.instances(op, "bf16")]
    assert len(set(names)) == len(names) == len(configs)
    assert FAMILY.instances(op, "fp32") == []
    for c in configs:
        assert shared_bytes(c) <= SMEM_OPT_IN and 2 <= c["stages"] <= 7
        assert threads(c) <= 512
        assert ("split_k" in c) == ("fused_reduce" in c) == (op == "conv2d_bwd_weight")
    assert {c["tma"] for c in configs} == {0, 1, 2}


def test_applicability_reasons():
    fwd = instance("conv2d_fwd", block_m=64, block_n=64, tma=0)
    assert FAMILY.applicable(fwd, problem("conv2d_fwd")) is None
    assert "fp32" in FAMILY.applicable(fwd, problem("conv2d_fwd", dtype="fp32"))
    assert "Cg=12" in FAMILY.applicable(fwd, problem("conv2d_fwd", C=12))
    assert "Kg=20" in FAMILY.applicable(fwd, problem("conv2d_fwd", K=20))
    pointwise = instance("conv2d_fwd", block_m=64, block_n=64, tma=2)
    assert "1x1" in FAMILY.applicable(pointwise, problem("conv2d_fwd"))
    assert FAMILY.applicable(pointwise, problem("conv2d_fwd", R=1, S=1, pad_h=0, pad_w=0)) is None
    data = instance("conv2d_bwd_data", block_m=64, block_n=64, tma=1)
    assert "Kg a multiple of 64" in FAMILY.applicable(data, problem("conv2d_bwd_data", K=72))
    assert FAMILY.applicable(data, problem("conv2d_bwd_data", K=128)) is None
    pointwise_one = dict(R=1, S=1, pad_h=0, pad_w=0)
    for op in ("conv2d_bwd_data", "conv2d_bwd_weight"):  # tma 2: 1x1, stride 1, G = 1
        plain = instance(op, block_m=64, block_n=64, tma=2)
        assert "1x1" in FAMILY.applicable(plain, problem(op))
        assert "1x1" in FAMILY.applicable(plain, problem(op, **pointwise_one, stride_h=2))
        assert "1x1" in FAMILY.applicable(plain, problem(op, **pointwise_one, G=2))
        assert FAMILY.applicable(plain, problem(op, K=72, **pointwise_one)) is None  # any 8 K
    wide = instance("conv2d_fwd", block_m=64, block_n=256, tma=0)
    assert "block_n=256" in FAMILY.applicable(wide, problem("conv2d_fwd", K=32))


def test_tensor_maps_follow_the_layouts():
    p = problem("conv2d_fwd", C=64, K=96, R=1, S=1, pad_h=0, pad_w=0)
    (x_map, w_map) = FAMILY.tensor_maps(instance("conv2d_fwd", block_m=128, block_n=64, tma=2), p)
    assert x_map == TensorMap("x", (64, 2 * 8 * 8), (128,), (64, 128))
    assert w_map == TensorMap("w", (64, 96), (128,), (64, 64))
    q = problem("conv2d_bwd_data", C=48, K=128, G=2, R=3, S=5, pad_w=2)
    (m,) = FAMILY.tensor_maps(instance("conv2d_bwd_data", tma=1), q)  # w as [K][R][S][Cg]
    assert m.buffer == "w" and m.dims == (24, 5, 3, 128) and m.box == (64, 1, 1, 64)
    assert m.strides == (2 * 24, 2 * 24 * 5, 2 * 24 * 15)
    (d,) = FAMILY.tensor_maps(instance("conv2d_bwd_weight", tma=1), problem("conv2d_bwd_weight"))
    assert d == TensorMap("dy", (64, 2 * 8 * 8), (128,), (64, 64))
    r = problem("conv2d_bwd_data", C=48, K=72, R=1, S=1, pad_h=0, pad_w=0)
    (dy_map, w_map) = FAMILY.tensor_maps(instance("conv2d_bwd_data", block_m=256, tma=2), r)
    assert dy_map == TensorMap("dy", (72, 2 * 8 * 8), (144,), (64, 256))  # [NPQ][K], K-major A
    assert w_map.dims == (48, 1, 1, 72) and w_map.box == (64, 1, 1, 64)  # k-tiles past K: zeros
    s = problem("conv2d_bwd_weight", C=48, K=72, R=1, S=1, pad_h=0, pad_w=0)
    (dy_map, x_map) = FAMILY.tensor_maps(instance("conv2d_bwd_weight", tma=2), s)
    assert dy_map == TensorMap("dy", (72, 2 * 8 * 8), (144,), (64, 64))
    assert x_map == TensorMap("x", (48, 2 * 8 * 8), (96,), (64, 64))  # [NHW][C], MN-major B
    assert FAMILY.tensor_maps(fwd := instance("conv2d_fwd", tma=0), p) == ()
    assert all(not isinstance(a, TensorMap) for a in FAMILY.launches(fwd, p)[0].args)


@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_persistent_grids(op):
    shapes = [dict(), dict(N=32, C=128, K=128, H=56, W=56), dict(G=4, C=64, K=32)]
    for shape, inst in itertools.product(shapes, FAMILY.instances(op, "bf16")):
        p, c = problem(op, **shape), inst.settings
        if FAMILY.applicable(inst, p):
            continue
        main = [l for l in FAMILY.launches(inst, p) if l.entry in (op, "wgmma_bwd_weight_split")]
        (gx, gy, gz), block = main[0].grid, main[0].block
        assert block == (threads(c), 1, 1) and gy == 1
        assert main[0].shared_bytes == shared_bytes(c)
        assert gx == min(FAMILY.tiles(inst, p), SM_COUNT * blocks_per_sm(c)) >= 1
        assert gz == FAMILY.grid_z(inst, p)


def test_pack_args_encodes_tensor_maps_by_the_device():
    class Device:
        def tensor_map(self, pointer, spec):
            return pointer.to_bytes(8, "little") + bytes(120)

    spec = TensorMap("w", (64, 96), (128,), (64, 64))
    launch = Launch("k", (1, 1, 1), (128, 1, 1), ("x", spec))
    args = pack_args(launch, {"x": 0x1000, "w": 0x2000}, Device())
    raw = bytes(args.buffer)
    assert int.from_bytes(raw[:8], "little") == 0x1000
    assert int.from_bytes(raw[8:16], "little") == 0x2000 and len(raw) == 8 + 128
    with pytest.raises(ValueError, match="needs the device"):
        pack_args(launch, {"x": 0x1000, "w": 0x2000})


def test_every_code_object_compiles_for_sm_90a_without_spills():
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    codes = {}
    for op in CONV_OPERATORS:
        for inst in FAMILY.instances(op, "bf16") + FAMILY.instances(op, "fp16")[:1]:
            codes.setdefault(tuple(sorted(FAMILY.defines(inst).items())), inst)
    compilers = [cuda.NvrtcCompiler() for _ in range(max(1, min(4, os.cpu_count() or 1)))]

    def one(item):
        i, (defines, inst) = item
        r = compilers[i % len(compilers)].compile(FAMILY.source(), defines=dict(defines),
                                                  target="sm_90a", timeout_s=300)
        return inst.name, r

    with ThreadPoolExecutor(len(compilers)) as pool:
        results = list(pool.map(one, enumerate(codes.items())))
    failures = []
    for name, r in results:
        if not r.ok:
            failures.append(f"{name}: {r.log[-1500:]}")
            continue
        for entry, res in r.resources["kernels"].items():
            if res.get("spill_bytes", 0) or res.get("local_bytes", 0):
                failures.append(f"{name} {entry}: spills {res}")
    assert not failures, "\n".join(failures[:20])
    print(f"\n{len(codes)} code objects")


@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_the_toy_cost_model_prices_every_instance(op):
    """Synthetic measurements (farm demo without a GPU or recording) cover the family, its
    split that fills the GPU included."""
    import math

    from kernels.conv.cost_model import synthetic_us

    for shape in (dict(), dict(N=32, C=256, K=512, H=14, W=14)):
        p = problem(op, **shape)
        for inst in FAMILY.instances(op, "bf16"):
            us = synthetic_us(p, inst)
            assert math.isfinite(us) and us > 0, inst.name


def test_other_targets_are_unsupported_and_not_compiled():
    from farm.compile_all import instances_of

    assert FAMILY.unsupported_target("sm_90a") is None
    reason = FAMILY.unsupported_target("sm_80")
    assert "sm_90a" in reason and "sm_80" in reason
    everywhere = {i.family for i in instances_of("conv2d_fwd", ["bf16"], target="sm_80")}
    assert "conv_wgmma" not in everywhere and "conv_igemm" in everywhere
    assert "conv_wgmma" in {i.family for i in instances_of("conv2d_fwd", ["bf16"],
                                                           target="sm_90a")}
    assert get_family("dwsep_wgmma_resident").unsupported_target("gfx90a")
    assert get_family("conv_igemm").unsupported_target("gfx90a") is None
