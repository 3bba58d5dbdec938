"""dwsep_fwd's references and shape record: the NumPy reference (kernels/dwsep/reference.py)
against a per-element loop over the formula on tiny shapes (strides, padding, multiplier 2, each
activation, the pointwise bias); the GPU reference (kernels/dwsep/reference.cu) compiled with
NVRTC for sm_90 and with hipRTC for gfx90a where each is installed, and run on the CPU through a
C++ compiler (the kernel's loops, with fp32 elements) against the NumPy reference; the record's
rules, sizes, costs and label (kernels/dwsep/problem.py)."""

from __future__ import annotations

import ctypes
import itertools
import math
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from farm.problems import ProblemError
from kernels.dwsep.problem import DWSEP_ACTIVATIONS, DwsepProblem
from kernels.dwsep.reference import activate, depthwise, dwsep_fwd, reference, tensor_shapes
from kernels.family import DTYPE_CODES
from kernels.source import load_source, source_path

SOURCE = "dwsep/reference.cu"
ENTRY = "dwsep_fwd_ref"


def problem(**fields) -> DwsepProblem:
    base = dict(op="dwsep_fwd", N=2, C=3, H=6, W=5, K=4, R=3, S=3, pad=1)
    return DwsepProblem(**{**base, **fields})


def random_inputs(p: DwsepProblem, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs whose depthwise values spread over about -10..10, so that relu, relu6 and
    hardswish cut on both sides; scale keeps its sign positive and away from zero."""
    rng = np.random.default_rng(seed)
    shapes = tensor_shapes(p)
    t = {"x": rng.normal(0.0, 2.0, shapes["x"]), "w_dw": rng.normal(0.0, 1.0, shapes["w_dw"]),
         "scale": rng.uniform(0.5, 1.5, shapes["scale"]),
         "shift": rng.uniform(-2.0, 3.0, shapes["shift"]),
         "w_pw": rng.normal(0.0, 1.0, shapes["w_pw"])}
    if p.pw_bias:
        t["b_pw"] = rng.normal(0.0, 1.0, shapes["b_pw"])
    return t


def loop_reference(p: DwsepProblem, t: dict[str, np.ndarray]) -> np.ndarray:
    """The formula, one output element at a time, in Python floats."""
    acts = {"none": lambda v: v, "relu": lambda v: max(v, 0.0),
            "relu6": lambda v: min(max(v, 0.0), 6.0), "silu": lambda v: v / (1.0 + math.exp(-v)),
            "hardswish": lambda v: v * min(max(v + 3.0, 0.0), 6.0) / 6.0}
    act = acts[p.activation]
    x, w_dw, w_pw = t["x"], t["w_dw"], t["w_pw"]
    y = np.zeros((p.N, p.P, p.Q, p.K))
    for n, oh, ow in itertools.product(range(p.N), range(p.P), range(p.Q)):
        mid = []
        for j in range(p.MC):
            c, d = j // p.multiplier, 0.0
            for r, s in itertools.product(range(p.R), range(p.S)):
                h, w = oh * p.stride - p.pad + r, ow * p.stride - p.pad + s
                if 0 <= h < p.H and 0 <= w < p.W:
                    d += float(x[n, h, w, c]) * float(w_dw[j, r, s])
            mid.append(act(d * float(t["scale"][j]) + float(t["shift"][j])))
        for k in range(p.K):
            v = sum(mid[j] * float(w_pw[k, j]) for j in range(p.MC))
            y[n, oh, ow, k] = v + (float(t["b_pw"][k]) if p.pw_bias else 0.0)
    return y


# ---- NumPy reference -------------------------------------------------------------------------
CASES = [
    dict(),                                           # 3x3, stride 1, pad 1
    dict(stride=2),                                   # odd H, even W: uneven last windows
    dict(pad=0),
    dict(pad=0, stride=2, H=7, W=7),
    dict(R=5, S=5, pad=2, H=7, W=6),
    dict(R=5, S=5, pad=2, stride=2, H=8, W=9),
    dict(R=5, S=5, pad=1),                            # less than "same" padding
    dict(R=3, S=1, pad=0, H=4, W=3),                  # a non-square filter
    dict(R=1, S=1, pad=0, stride=2),                  # a strided 1x1 depthwise
    dict(N=1, C=1, K=1, H=1, W=1, pad=1),             # one pixel: padding everywhere else
    dict(multiplier=2),
    dict(multiplier=2, stride=2, R=5, S=5, pad=2, H=9, W=7),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(f"{k}{v}" for k, v in c.items())
                         or "base")
@pytest.mark.parametrize("activation", DWSEP_ACTIVATIONS)
def test_numpy_reference_matches_the_formula(case, activation):
    p = problem(**case, activation=activation, pw_bias=len(case) % 2)
    t = random_inputs(p, seed=len(CASES) * DWSEP_ACTIVATIONS.index(activation) + CASES.index(case))
    y = reference(p, t)
    assert y.shape == (p.N, p.P, p.Q, p.K) and y.dtype == np.float64
    np.testing.assert_allclose(y, loop_reference(p, t), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pw_bias", [0, 1])
@pytest.mark.parametrize("multiplier", [1, 2])
def test_multiplier_and_bias(multiplier, pw_bias):
    p = problem(multiplier=multiplier, pw_bias=pw_bias, activation="relu6", stride=2, C=5, K=3)
    t = random_inputs(p, seed=7)
    np.testing.assert_allclose(reference(p, t), loop_reference(p, t), rtol=1e-12, atol=1e-12)


def test_inputs_reach_every_side_of_the_activations():
    p = problem(C=8, H=8, W=8)
    t = random_inputs(p)
    mid = depthwise(t["x"], t["w_dw"], p.stride, p.pad) * t["scale"] + t["shift"]
    assert (mid < 0).mean() > 0.2 and (mid > 6).mean() > 0.05
    assert (mid < -3).mean() > 0.05 and (abs(mid) < 3).mean() > 0.2 and (mid > 3).mean() > 0.05


def test_multiplier_two_reads_each_input_channel_twice():
    """Depthwise channels 2c and 2c + 1 both read input channel c (PyTorch's grouped order)."""
    p = problem(multiplier=2, C=2, K=1, R=1, S=1, pad=0, H=1, W=1, N=1)
    x = np.array([3.0, 5.0]).reshape(1, 1, 1, 2)
    w_dw = np.array([1.0, 10.0, 100.0, 1000.0]).reshape(4, 1, 1)
    ones, zeros = np.ones(4), np.zeros(4)
    y = dwsep_fwd(x, w_dw, ones, zeros, np.ones((1, 4)), stride=p.stride, pad=p.pad)
    assert y.item() == 3.0 + 30.0 + 500.0 + 5000.0


def test_activations():
    v = np.array([-1000.0, -7.0, -0.5, 0.0, 0.5, 5.5, 6.0, 7.0, 1000.0])
    assert np.array_equal(activate(v, "none"), v)
    assert np.array_equal(activate(v, "relu"), [0, 0, 0, 0, 0.5, 5.5, 6, 7, 1000])
    assert np.array_equal(activate(v, "relu6"), [0, 0, 0, 0, 0.5, 5.5, 6, 6, 6])
    with np.errstate(over="raise", invalid="raise"):  # no overflow at either end
        silu = activate(v, "silu")
    np.testing.assert_allclose(silu[1:-1], v[1:-1] / (1 + np.exp(-v[1:-1])), rtol=1e-14)
    assert silu[0] == 0.0 and silu[-1] == 1000.0
    with pytest.raises(ValueError, match="gelu"):
        activate(v, "gelu")


def test_hardswish():
    """PyTorch's x * relu6(x + 3) / 6: 0 up to -3, x from 3 on, x * (x + 3) / 6 between (0 at
    0, negative below it), continuous at both ends."""
    v = np.array([-1000.0, -3.5, -3.0, -2.5, -0.5, 0.0, 0.5, 2.5, 3.0, 3.5, 1000.0])
    between = v[3:8] * (v[3:8] + 3.0) / 6.0
    expected = [0.0, 0.0, 0.0, *between, 3.0, 3.5, 1000.0]
    np.testing.assert_allclose(activate(v, "hardswish"), expected, rtol=1e-15, atol=0)
    assert activate(v, "hardswish")[4] < 0 and activate(v, "hardswish")[5] == 0
    ends = np.array([-3.0 - 1e-9, -3.0 + 1e-9, 3.0 - 1e-9, 3.0 + 1e-9])
    np.testing.assert_allclose(activate(ends, "hardswish"), [0.0, 0.0, 3.0, 3.0], atol=1e-8)


def test_flat_tensors_and_shapes():
    p = problem(multiplier=2, pw_bias=1)
    t = random_inputs(p)
    flat = {k: v.reshape(-1) for k, v in t.items()}
    assert np.array_equal(reference(p, flat), reference(p, t))
    sizes = {k: math.prod(s) for k, s in tensor_shapes(p).items()}
    assert sizes == p.tensor_elements()
    assert "b_pw" not in tensor_shapes(problem())


# ---- GPU reference: compiles ------------------------------------------------------------------
def _compile(compiler_cls, target, dtypes):
    compiler = compiler_cls()
    try:
        return {dtype: compiler.compile(load_source(SOURCE), target=target, timeout_s=300,
                                        defines={"FARM_DTYPE": DTYPE_CODES[dtype],
                                                 "FARM_REFERENCE": 1})
                for dtype in dtypes}
    finally:
        compiler.close()


def test_cuda_reference_compiles_for_sm_90():
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    for dtype, r in _compile(cuda.NvrtcCompiler, "sm_90", ("bf16", "fp16", "fp32")).items():
        assert r.ok, f"{dtype}: {r.log[-2000:]}"
        kernels = r.resources.get("kernels", {})
        if not kernels and "ptxas" not in r.log:
            continue  # this compiler gave no resource report
        assert set(kernels) == {ENTRY}
        assert not kernels[ENTRY].get("spill_bytes") and not kernels[ENTRY].get("local_bytes")


def test_reference_compiles_for_gfx90a():
    try:
        from farm.gpu import hip
    except Exception as exc:  # noqa: BLE001 - no hip-python or no hipRTC library here
        pytest.skip(f"hipRTC is not usable here: {exc}")
    try:
        results = _compile(hip.HiprtcCompiler, "gfx90a", ("bf16", "fp16"))
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"hipRTC is not usable here: {exc}")
    if not results["bf16"].ok and "did not start" in results["bf16"].log:
        pytest.skip(results["bf16"].log)
    for dtype, r in results.items():
        assert r.ok, f"{dtype}: {r.log[-2000:]}"


def kernel_text() -> str:
    """reference.cu with dwsep_common.cuh inlined and common.cuh left out (the host prelude
    stands in for it)."""
    common = (source_path(SOURCE).parent / "dwsep_common.cuh").read_text()
    common = re.sub(r'^#include "../common.cuh"$|^#pragma once$', "", common, flags=re.MULTILINE)
    return re.sub(r'^#include "dwsep_common.cuh"$', lambda _: common,
                  source_path(SOURCE).read_text(), flags=re.MULTILINE)


def test_source_agrees_with_the_record():
    """The activation codes are DWSEP_ACTIVATIONS' indices; the parameter block is 15 int32,
    as the operator passes it."""
    from kernels.dwsep.operator import DwsepParams

    text = kernel_text()
    enum = re.search(r"enum DwsepActivation \{([^}]*)\}", text).group(1)
    codes = {name.lower(): int(v) for name, v in re.findall(r"DWSEP_(\w+) = (\d+)", enum)}
    assert codes == {a: i for i, a in enumerate(DWSEP_ACTIVATIONS)}
    struct = re.search(r"struct DwsepParams \{([^}]*)\}", text).group(1)
    fields = re.findall(r"\b(\w+)\s*[,;]", re.sub(r"\bint\b", "", struct))
    assert fields == [name for name, _ in HostParams._fields_] == [
        name for name, _ in DwsepParams._fields_]
    assert re.search(rf'extern "C" __global__[^;{{]*\b{ENTRY}\(', text)


# ---- GPU reference: its loops, run on the CPU ----------------------------------------------------
class HostParams(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in ("N", "C", "H", "W", "K", "R", "S", "P", "Q",
                                                  "stride", "pad", "M", "MC", "activation",
                                                  "pw_bias")]


# Stands in for common.cuh (fp32 elements) and the CUDA built-ins: the kernel's grid-stride loop
# runs once per simulated thread of a small grid, so every output is written exactly once only
# if the loop's indexing is right.
HOST_PRELUDE = r"""
#include <math.h>
struct FarmDim3 { unsigned x, y, z; };
static FarmDim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
typedef float elem_t;
static inline float to_float(float v) { return v; }
"""
HOST_DRIVER = r"""
extern "C" void run_grid(const float* x, const float* w_dw, const float* scale,
                         const float* shift, const float* w_pw, const float* b_pw, float* y,
                         DwsepParams p, unsigned blocks, unsigned threads) {
  gridDim = {blocks, 1, 1};
  blockDim = {threads, 1, 1};
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) {
      blockIdx = {b, 0, 0};
      threadIdx = {t, 0, 0};
      dwsep_fwd_ref(x, w_dw, scale, shift, w_pw, b_pw, y, p);
    }
}
"""


@pytest.fixture(scope="module")
def host_reference(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None or sys.platform == "win32":
        pytest.skip("no C++ compiler here")
    kernel = kernel_text()
    folder = tmp_path_factory.mktemp("dwsep_host")
    (folder / "reference.cpp").write_text(HOST_PRELUDE + kernel + HOST_DRIVER)
    done = subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o",
                           str(folder / "reference.so"), str(folder / "reference.cpp")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lib = ctypes.CDLL(str(folder / "reference.so"))
    lib.run_grid.argtypes = [ctypes.c_void_p] * 7 + [HostParams, ctypes.c_uint, ctypes.c_uint]
    return lib


def host_params(p: DwsepProblem) -> HostParams:
    return HostParams(p.N, p.C, p.H, p.W, p.K, p.R, p.S, p.P, p.Q, p.stride, p.pad,
                      p.multiplier, p.MC, DWSEP_ACTIVATIONS.index(p.activation), p.pw_bias)


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(f"{k}{v}" for k, v in c.items())
                         or "base")
@pytest.mark.parametrize("activation", DWSEP_ACTIVATIONS)
def test_gpu_reference_loops_match_numpy(host_reference, case, activation):
    p = problem(**case, activation=activation, pw_bias=1 - len(case) % 2)
    t = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in random_inputs(p, 3).items()}
    y = np.full(tensor_shapes(p)["y"], np.nan, dtype=np.float32)
    bias = t["b_pw"].ctypes.data if p.pw_bias else None  # not read without pw_bias
    host_reference.run_grid(t["x"].ctypes.data, t["w_dw"].ctypes.data, t["scale"].ctypes.data,
                            t["shift"].ctypes.data, t["w_pw"].ctypes.data, bias, y.ctypes.data,
                            host_params(p), 3, 5)
    expected = reference(p, {k: v.astype(np.float64) for k, v in t.items()})
    assert not np.isnan(y).any()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4 * np.abs(expected).max())


# ---- the shape record ---------------------------------------------------------------------------
def test_defaults_and_conversion():
    p = DwsepProblem.from_fields("dwsep_fwd", "fp16", {"N": "8", "C": 32, "H": 112, "W": 112,
                                                        "K": 16, "R": 3, "S": 3, "pad": "1",
                                                        "layer": "ignored"})
    assert (p.stride, p.multiplier, p.activation, p.pw_bias, p.layout) == (1, 1, "none", 0,
                                                                            "NHWC")
    assert p.N == 8 and p.pad == 1 and p.dtype == "fp16"
    with pytest.raises(ProblemError, match="missing field.*pad"):
        DwsepProblem.from_fields("dwsep_fwd", "bf16", {"N": 1, "C": 4, "H": 5, "W": 5, "K": 3,
                                                       "R": 3, "S": 3})
    assert p.numbers()["activation"] == 0
    assert problem(activation="silu").numbers()["activation"] == 3
    assert problem(activation="hardswish").numbers()["activation"] == 4
    assert problem(activation="relu").geometry() == problem(activation="relu6").geometry()
    assert problem().key != problem(activation="relu").key


@pytest.mark.parametrize("fields, message", [
    (dict(N=0), "N=0 must be at least 1"),
    (dict(K=0), "K=0 must be at least 1"),
    (dict(pad=-1), "pad=-1 must be at least 0"),
    (dict(stride=3), "stride=3"),
    (dict(multiplier=3), "multiplier=3"),
    (dict(pw_bias=2), "pw_bias=2"),
    (dict(activation="gelu"), "unknown activation 'gelu'"),
    (dict(pad=3), "pad=3 is not below the filter's R=3"),
    (dict(S=1, pad=1), "pad=1 is not below the filter's S=1"),
    (dict(H=1, pad=0), "output size"),
    (dict(layout="NCHW"), "layout"),
    (dict(op="conv2d_fwd"), "unknown operator"),
    (dict(dtype="int8"), "unknown dtype"),
    (dict(N=2**20, H=64, W=64, C=16), "x has"),
    (dict(C="three"), "C must be an integer"),
])
def test_rules_name_the_field(fields, message):
    with pytest.raises(ProblemError, match=re.escape(message)):
        problem(**fields)


def test_sizes_costs_and_label():
    p = problem(N=8, C=32, H=112, W=112, K=16, stride=2, multiplier=2, activation="relu6",
                pw_bias=1)
    assert (p.P, p.Q, p.MC) == (56, 56, 64)
    assert p.flops == 2 * 8 * 56 * 56 * 64 * (9 + 16)
    elements = 8 * 112 * 112 * 32 + 64 * 9 + 2 * 64 + 16 * 64 + 16 + 8 * 56 * 56 * 16
    assert p.min_bytes == 2 * elements
    assert DwsepProblem(**{**p.record(), "dtype": "fp32"}).min_bytes == 4 * elements
    assert p.label() == "N8 C32 112x112 K16 3x3 s2 p1 M2 relu6 bias"
    assert problem(pad=0).label() == "N2 C3 6x5 K4 3x3"
    assert problem(R=5, S=5, pad=2, H=7, W=7).P == 7  # "same" padding keeps the size
