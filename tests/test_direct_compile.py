"""conv_direct: every instance compiles for sm_90a with NVRTC without spilling, and the descriptor
(instance counts, applicability reasons, launch geometry) holds up without a GPU."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor

import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.direct import FAMILY, MAX_GROUP_WIDTH, SHARED_LIMIT
from kernels.conv.operator import OPERATORS

OPS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")
TARGET = "sm_90a"

ANCHORS = [  # /work/shared/ANCHORS.md shapes this family serves, N=32
    dict(C=144, K=144, G=144, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1),
    dict(C=960, K=960, G=960, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(C=240, K=240, G=240, H=28, W=28, R=5, S=5, pad_h=2, pad_w=2),
    dict(C=96, K=96, G=96, H=56, W=56, R=7, S=7, pad_h=3, pad_w=3),
    dict(C=256, K=256, G=32, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1),
    dict(C=224, K=224, G=28, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1),
    dict(C=144, K=144, G=144, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
]


def problem(op, dtype="bf16", N=32, **fields):
    return ConvProblem.from_fields(op, dtype, dict(N=N, **fields))


# ---- compile -------------------------------------------------------------------------------
def _nvrtc_compile(job):
    """(ok, log) for one instance; runs in a worker process."""
    from cuda.bindings import nvrtc

    source, defines = job
    prog = nvrtc.nvrtcCreateProgram(source.encode(), b"direct.cu", 0, [], [])[1]
    try:
        opts = [f"--gpu-architecture={TARGET}", "-std=c++17", "-default-device",
                "--ptxas-options=-v"] + [f"-D{k}={v}" for k, v in defines.items()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = nvrtc.nvrtcGetProgramLogSize(prog)[1]
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        return err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log.rstrip(b"\0 ").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _dtypes_to_compile():
    """Every element type (fp32 instances are compiled for half the occupancy, so their
    registers differ); FARM_QUICK=1 leaves out fp16, whose code is bf16's but for conversions."""
    return ("bf16", "fp32") if os.environ.get("FARM_QUICK") else ("bf16", "fp32", "fp16")


@pytest.fixture(scope="module")
def compiled():
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) not installed")
    source = FAMILY.source()
    jobs: dict[tuple, tuple[str, dict]] = {}
    for dtype in _dtypes_to_compile():
        for op in OPS:
            for inst in FAMILY.instances(op, dtype):
                defines = FAMILY.defines(inst)
                jobs.setdefault(tuple(sorted(defines.items())), (inst.name, defines))
    with ProcessPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = pool.map(_nvrtc_compile, [(source, d) for _, d in jobs.values()])
        return {key: (name, *result) for (key, (name, _)), result in zip(jobs.items(), results)}


def _code(compiled, inst):
    """(ok, log) of the code object an instance runs (instances differing only in launch-time
    settings share one)."""
    _, ok, log = compiled[tuple(sorted(FAMILY.defines(inst).items()))]
    return ok, log


def test_every_instance_compiles_without_spills(compiled):
    failures, spills, regs = [], [], []
    for name, ok, log in compiled.values():
        if not ok:
            failures.append(f"{name}:\n{log[:2000]}")
            continue
        spilled = [int(b) for b in re.findall(r"(\d+) bytes spill stores", log)]
        stack = [int(b) for b in re.findall(r"(\d+) bytes stack frame", log)]
        if any(spilled) or any(stack):
            spills.append(f"{name}: spill stores {spilled}, stack {stack}")
        regs += [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert not failures, "\n".join(failures)
    assert not spills, "\n".join(spills)
    assert regs and max(regs) <= 255


def test_every_entry_point_is_compiled(compiled):
    """Whatever a launch names exists in the instance's code object (ptxas lists each entry):
    unit and larger strides, dilation, unrolled and generic filters."""
    shapes = [dict(ANCHORS[0], **extra) for extra in (
        {}, dict(stride_h=2, stride_w=2), dict(dil_h=2, dil_w=2, pad_h=2, pad_w=2),
        dict(stride_w=3, pad_h=1))]
    for op in OPS:
        for inst in FAMILY.instances(op, "bf16"):
            ok, log = _code(compiled, inst)
            entries = set(re.findall(r"Compiling entry function '([^']+)'", log))
            for shape in shapes:
                p = problem(op, **shape)
                if FAMILY.applicable(inst, p) is None:
                    assert {launch.entry for launch in FAMILY.launches(inst, p)} <= entries


# ---- descriptor ----------------------------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_instance_counts_and_names(op):
    instances = FAMILY.instances(op, "bf16")
    assert 20 <= len(instances) <= 50
    assert len({i.name for i in instances}) == len(instances)
    assert len({i.key for i in instances}) == len(instances)
    for inst in instances:
        defines = FAMILY.defines(inst)
        assert defines["DIRECT_OP"] == OPS.index(op)
        assert defines["FARM_DTYPE"] == 2
        assert all(k.isupper() for k in defines)


def _reason(op, cfg_match, **shape):
    p = problem(op, **shape)
    inst = next(i for i in FAMILY.instances(op, "bf16")
                if all(i.settings.get(k) == v for k, v in cfg_match.items()))
    return FAMILY.applicable(inst, p)


def test_applicability_reasons():
    dw = dict(C=64, K=64, G=64, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)
    grouped = dict(C=64, K=64, G=8, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)
    assert _reason("conv2d_fwd", dict(grouped=0, fr=3), **dw) is None
    assert "C/G == K/G == 1" in _reason("conv2d_fwd", dict(grouped=0), **grouped)
    assert "grouped=0" in _reason("conv2d_fwd", dict(grouped=1), **dw)
    assert "3x3" in _reason("conv2d_fwd", dict(grouped=0, fr=5), **dw)
    odd = dict(dw, C=36, K=36, G=36)
    assert "multiple of vec=8" in _reason("conv2d_fwd", dict(grouped=0, vec=8), **odd)
    wide = dict(grouped, G=2)  # C/G = 32
    assert f"above {MAX_GROUP_WIDTH}" in _reason("conv2d_fwd", dict(grouped=1), **wide)
    cg4 = dict(grouped, C=32, G=8)  # C/G = 4, K/G = 8
    assert "C/G=4 is not a multiple of vec=8" in _reason("conv2d_fwd", dict(grouped=1, vec=8),
                                                        **cg4)
    assert "K/G=8 is not a multiple of vec" not in (_reason(
        "conv2d_bwd_data", dict(grouped=1, vec=8, kpt=4), **cg4) or "")
    assert "C/G=4 is not a multiple of kpt=8" in _reason(
        "conv2d_bwd_data", dict(grouped=1, vec=8, kpt=8), **cg4)
    strided = dict(dw, stride_h=2, stride_w=2)
    assert "unit stride" in _reason("conv2d_bwd_data", dict(smem=8, fr=3), **strided)
    big = dict(dw, C=96, K=96, G=96, H=56, W=56, R=7, S=7, pad_h=3, pad_w=3)
    assert _reason("conv2d_bwd_data", dict(smem=8, fr=7, vec=4), **big) is None
    assert "shared memory" in _reason("conv2d_fwd", dict(smem=8, fr=3, vec=8), **strided)


def test_stride_2_along_the_row_has_its_own_windowed_entry():
    dw = dict(N=2, C=96, K=96, G=96, H=15, W=15, R=5, S=5, pad_h=2, pad_w=2)
    fwd = FAMILY.instances("conv2d_fwd", "bf16")
    five = next(i for i in fwd if i.settings["fr"] == 5 and not i.settings["smem"])
    any_size = next(i for i in fwd if i.settings["fr"] == 0)

    def entry(inst, **extra):
        return FAMILY.entry(inst, problem("conv2d_fwd", **dict(dw, **extra)))

    assert entry(five, stride_h=2, stride_w=2) == "conv2d_fwd_s2"
    assert entry(five, stride_h=1, stride_w=2) == "conv2d_fwd_s2"  # the row's stride decides
    assert entry(five, stride_h=2, stride_w=1) == "conv2d_fwd"
    assert entry(five, stride_h=3, stride_w=3) == "conv2d_fwd_generic"
    assert entry(five, stride_h=2, stride_w=2, dil_h=2, dil_w=2, pad_h=4,
                 pad_w=4) == "conv2d_fwd_generic"
    assert entry(any_size, stride_h=2, stride_w=2) == "conv2d_fwd"  # generic in its main entry
    back = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16") if i.settings["fr"] == 5)
    assert FAMILY.entry(back, problem("conv2d_bwd_data", stride_h=2, stride_w=2, **dw)) == (
        "conv2d_bwd_data_strided")
    grads = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16") if i.settings["fr"] == 5)
    for stride, want in ((2, "conv2d_bwd_weight_s2"), (1, "conv2d_bwd_weight"),
                         (3, "conv2d_bwd_weight_generic")):
        p = problem("conv2d_bwd_weight", stride_h=stride, stride_w=stride, **dw)
        assert FAMILY.launches(grads, p)[0].entry == want


@pytest.mark.parametrize("op", OPS)
def test_every_small_group_shape_is_served(op):
    """Any C/G, K/G up to the family's limit, any filter and stride: some instance serves it."""
    shapes = [dict(C=c * g, K=k * g, G=g, H=9, W=10, R=r, S=s, stride_h=st, stride_w=st,
                   pad_h=1, pad_w=1, dil_h=d, dil_w=d)
              for (c, k, g) in ((1, 1, 24), (1, 1, 7), (3, 3, 4), (8, 8, 4), (16, 16, 2),
                                (1, 2, 8), (2, 1, 8), (5, 7, 3), (16, 1, 3))
              for (r, s) in ((3, 3), (1, 1), (5, 5), (7, 7), (3, 5))
              for st in (1, 2) for d in (1, 2)
              if (9 + 2 - d * (r - 1) - 1) >= 0 and (10 + 2 - d * (s - 1) - 1) >= 0]
    for shape in shapes:
        p = problem(op, N=2, **shape)
        served = [i for i in FAMILY.instances(op, "bf16") if FAMILY.applicable(i, p) is None]
        assert served, f"nothing serves {op} {p.label()}"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", ANCHORS, ids=lambda s: f"C{s['C']}G{s['G']}H{s['H']}R{s['R']}"
                         + ("s2" if s.get("stride_h", 1) > 1 else ""))
def test_launch_geometry(op, shape):
    p = problem(op, **shape)
    names = [t.name for t in OPERATORS[op].tensors(p)]
    served = 0
    for inst in FAMILY.instances(op, "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        served += 1
        cfg, plan = inst.settings, FAMILY.plan(inst, p)
        unit = cfg["kpt"] if cfg["grouped"] else cfg["vec"]
        launches = FAMILY.launches(inst, p)
        main = launches[0]
        assert main.entry == FAMILY.entry(inst, p) and main.entry.startswith(op)
        assert main.block == (cfg["block"], 1, 1)
        assert 1 <= main.grid[0] < 2**31 and 1 <= main.grid[1] <= 65535
        assert 1 <= main.grid[2] <= 65535
        assert main.shared_bytes <= SHARED_LIMIT
        assert plan.cub * main.grid[1] >= plan.units > plan.cub * (main.grid[1] - 1)
        assert plan.cub <= cfg["block"]
        if op == "conv2d_bwd_weight":
            assert main.args[:3] == (names[0], names[1], "workspace")
            assert plan.total == p.K * p.R * p.S * p.c_per_group
            assert FAMILY.workspace_bytes(inst, p) == plan.splits * plan.total * 4
            reduce = launches[1]
            assert reduce.entry == "conv2d_bwd_weight_reduce"
            assert reduce.args == ("workspace", names[2], plan.total, plan.splits)
            assert reduce.grid[0] * 16 >= plan.total
            taps = cfg["fr"] and (cfg["rb"] or cfg["fr"])
            assert main.grid[2] * (taps or 1) >= (p.R if taps else p.R * p.S)
        else:
            assert len(launches) == 1
            assert main.args[:3] == tuple(names)
            assert FAMILY.workspace_bytes(inst, p) == 0
            channels = p.K if op == "conv2d_fwd" else p.C
            assert plan.units * unit == channels
        assert main.args[-1] == plan.cub
    assert served, f"no instance serves {p.label()}"
