"""Group-normalization backward without a GPU: the NumPy backward against finite differences of
the forward, the config spaces, applicability rules and launch geometry of gn_onepass and
gn_twopass (kernels/groupnorm/plan.py), every distinct code object compiled for sm_90a (NVRTC)
and a subset for gfx90a (hipRTC), and the GPU check's own comparison logic.

On a GPU: python -m kernels.groupnorm.gpu_check (every instance against NumPy)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kernels.groupnorm import gpu_check, plan
from kernels.groupnorm.problem import GroupNormProblem
from kernels.groupnorm.reference import (
    groupnorm_bwd,
    groupnorm_fwd,
    groupnorm_fwd_stats,
)
from kernels.source import load_source

EPS = 1e-5


def gn(N, C, H, W, G, layout="nhwc", dtype="bf16"):
    return GroupNormProblem("groupnorm_bwd", N, C, H, W, G, layout, dtype)


# ---- (a) the NumPy backward is the gradient of the forward --------------------------------------
def _tensor_shape(N, C, H, W, layout):
    return (N, H, W, C) if layout == "nhwc" else (N, C, H, W)


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("N, C, H, W, G", [(2, 6, 2, 3, 1), (2, 6, 2, 3, 2), (2, 6, 2, 3, 3),
                                           (2, 6, 2, 3, 6), (1, 4, 1, 3, 2), (3, 2, 1, 1, 1)])
def test_backward_matches_finite_differences(N, C, H, W, G, layout):
    """L = sum(y * w) with y the forward: central differences of L in x, gamma and beta give
    dx, dgamma, dbeta of the backward fed with w as dy and the forward's own statistics."""
    rng = np.random.default_rng(N * 100 + C * 10 + G)
    shape = _tensor_shape(N, C, H, W, layout)
    x = rng.standard_normal(shape) + 0.3
    w = rng.standard_normal(shape)
    gamma, beta = rng.uniform(0.5, 1.5, C), rng.standard_normal(C)

    def loss(x_, gamma_, beta_):
        return float((groupnorm_fwd(x_, gamma_, beta_, G, EPS, layout) * w).sum())

    mean, rstd = groupnorm_fwd_stats(x, G, EPS, layout)
    dx, dgamma, dbeta = groupnorm_bwd(x, w, gamma, mean, rstd, G, layout)

    def numeric(arr, f):
        out, h = np.zeros_like(arr), 1e-6
        for i in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[i] += h
            minus[i] -= h
            out[i] = (f(plus) - f(minus)) / (2 * h)
        return out

    num_dx = numeric(x, lambda v: loss(v, gamma, beta))
    num_dg = numeric(gamma, lambda v: loss(x, v, beta))
    num_db = numeric(beta, lambda v: loss(x, gamma, v))
    assert dx.shape == x.shape and dgamma.shape == (C,) and dbeta.shape == (C,)
    scale = max(np.abs(num_dx).max(), 1.0)  # a group of one element: dx is 0
    np.testing.assert_allclose(dx, num_dx, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(dgamma, num_dg, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dbeta, num_db, rtol=1e-6, atol=1e-7)


def test_layouts_agree():
    rng = np.random.default_rng(5)
    N, C, H, W, G = 2, 12, 3, 5, 4
    x = rng.standard_normal((N, C, H, W))
    dy = rng.standard_normal((N, C, H, W))
    gamma = rng.standard_normal(C)
    mean, rstd = groupnorm_fwd_stats(x, G, EPS, "nchw")
    m2, r2 = groupnorm_fwd_stats(x.transpose(0, 2, 3, 1), G, EPS, "nhwc")
    np.testing.assert_allclose(mean, m2)
    np.testing.assert_allclose(rstd, r2)
    a = groupnorm_bwd(x, dy, gamma, mean, rstd, G, "nchw")
    b = groupnorm_bwd(x.transpose(0, 2, 3, 1), dy.transpose(0, 2, 3, 1), gamma, mean, rstd, G,
                      "nhwc")
    np.testing.assert_allclose(a[0], b[0].transpose(0, 3, 1, 2), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12)
    np.testing.assert_allclose(a[2], b[2], rtol=1e-12)


def test_saved_statistics_are_used_as_given():
    """The backward uses mean and rstd as passed (fp32 saved statistics), not recomputed."""
    rng = np.random.default_rng(6)
    x, dy = rng.standard_normal((1, 4, 2, 2)), rng.standard_normal((1, 4, 2, 2))
    mean, rstd = groupnorm_fwd_stats(x, 2, EPS, "nchw")
    base = groupnorm_bwd(x, dy, np.ones(4), mean, rstd, 2, "nchw")
    moved = groupnorm_bwd(x, dy, np.ones(4), mean + 0.5, rstd, 2, "nchw")
    assert not np.allclose(base[1], moved[1])
    np.testing.assert_allclose(base[2], moved[2])  # dbeta does not depend on the statistics


# ---- (b) config spaces, applicability, geometry --------------------------------------------------
def test_config_spaces():
    for dtype in ("bf16", "fp16", "fp32"):
        one, two = plan.configs("gn_onepass", dtype), plan.configs("gn_twopass", dtype)
        vecs = plan.vector_widths(dtype)
        assert vecs == ((1, 2, 4, 8) if dtype != "fp32" else (1, 2, 4))
        assert len(one) == (35 if dtype != "fp32" else 27)
        assert len(two) == 2 * 3 * len(vecs) * 4
        for family, cfgs in (("gn_onepass", one), ("gn_twopass", two)):
            names = {plan.instance_name(family, dtype, c) for c in cfgs}
            assert len(names) == len(cfgs)
            for cfg in cfgs:
                d = plan.defines(family, dtype, cfg)
                assert d["FARM_DTYPE"] == plan.DTYPE_CODES[dtype]
                assert cfg["vec"] * plan.DTYPE_BYTES[dtype] <= 16
                assert "FARM_SPLIT_HW" not in d  # launch-time: one code object for every split
        for cfg in one:
            if cfg["layout"] == 1:
                assert cfg["cpt"] == 1
            else:
                assert cfg["cpt"] % cfg["vec"] == 0 and cfg["threads"] * cfg["cpt"] <= 4096
    with pytest.raises(ValueError, match="unknown family"):
        plan.configs("gn_threepass", "bf16")


EDGE_SHAPES = [(1, 1, 1, 3, 1), (2, 64, 7, 7, 1), (2, 64, 7, 7, 64), (3, 96, 7, 7, 32),
               (1, 40, 1, 1, 8), (2, 128, 65, 65, 32), (1, 36, 65, 65, 6), (1, 32, 512, 512, 8),
               (1, 3, 5, 7, 1), (2, 1280, 8, 8, 32), (1, 2048, 4, 4, 1), (5, 24, 14, 14, 24),
               (33, 64, 3, 3, 16), (1, 4096, 1, 3, 4096), (7, 30, 3, 1, 15), (4, 96, 1, 1, 32)]


def _problems():
    for (N, C, H, W, G), layout, dtype in itertools.product(EDGE_SHAPES, ("nhwc", "nchw"),
                                                            ("bf16", "fp32")):
        yield gn(N, C, H, W, G, layout, dtype)


def test_vec1_serves_every_shape():
    """vec=1 instances are refused only for their layout, or (gn_twopass) for more HW chunks
    than HW has rows; split_hw=1 serves every shape."""
    for p in _problems():
        for family in plan.FAMILIES:
            for cfg in plan.configs(family, p.dtype):
                if cfg["vec"] != 1 or cfg["layout"] != plan.LAYOUTS[p.layout]:
                    continue
                reason = plan.applicable(family, cfg, p, p.dtype)
                if family == "gn_twopass" and cfg["split_hw"] > p.HW:
                    assert "split_hw" in reason
                else:
                    assert reason is None, (family, cfg, p.label(), reason)


def _first(family, dtype="bf16", **match):
    return next(c for c in plan.configs(family, dtype)
                if all(c[k] == v for k, v in match.items()))


def test_applicability_reasons():
    nhwc = gn(2, 96, 7, 7, 32)            # C/G = 3, H*W = 49
    nchw = gn(2, 96, 7, 7, 32, "nchw")
    one8 = _first("gn_onepass", layout=0, vec=8)
    assert "C/G=3 is not a multiple of vec=8" in plan.applicable("gn_onepass", one8, nhwc)
    assert "instance is for nhwc" in plan.applicable("gn_onepass", one8, nchw)
    assert "instance is for fp32, problem is bf16" in plan.applicable("gn_onepass", one8, nhwc,
                                                                      "fp32")
    two8 = _first("gn_twopass", layout=0, vec=8, split_hw=4)
    assert plan.applicable("gn_twopass", two8, nhwc) is None  # C = 96 is a multiple of 8
    assert "C=36 is not a multiple of vec=8" in plan.applicable(
        "gn_twopass", two8, gn(1, 36, 7, 7, 6))
    nchw2 = _first("gn_onepass", layout=1, vec=2)
    assert "H*W=49 is not a multiple of vec=2" in plan.applicable("gn_onepass", nchw2, nchw)
    assert plan.applicable("gn_onepass", nchw2, gn(2, 96, 8, 7, 32, "nchw")) is None
    two64 = _first("gn_twopass", layout=1, vec=4, split_hw=64)
    assert "split_hw=64 exceeds H*W/vec=14" in plan.applicable(
        "gn_twopass", two64, gn(2, 96, 8, 7, 32, "nchw"))
    with pytest.raises(ValueError, match="above 262144"):
        gn(1, 8, 513, 512, 1)
    with pytest.raises(ValueError, match="not divisible by G"):
        gn(1, 10, 2, 2, 4)
    with pytest.raises(ValueError, match="layout"):
        gn(1, 8, 2, 2, 4, "nhcw")


def test_launch_geometry():
    """Every launch covers what its kernel needs (see the kernels' header comments)."""
    for p in _problems():
        for family in plan.FAMILIES:
            for cfg in plan.configs(family, p.dtype):
                if plan.applicable(family, cfg, p, p.dtype):
                    continue
                t, vec = cfg["threads"], cfg["vec"]
                launches = plan.launches(family, cfg, p)
                for launch in launches:
                    assert launch.block == (t, 1, 1) and launch.shared_bytes == 0
                    assert 1 <= launch.grid[0] < 2**31
                    assert 1 <= launch.grid[1] <= 65535 and 1 <= launch.grid[2] <= 65535
                    assert sum(isinstance(a, plan.GnParams) for a in launch.args) == 1
                ws = plan.workspace_bytes(family, cfg, p)
                if family == "gn_onepass":
                    main, dparams = launches
                    assert (main.entry, dparams.entry) == ("gn_onepass_main",
                                                           "gn_onepass_dparams")
                    assert main.grid == (p.N * p.G, 1, 1)
                    assert dparams.grid[0] * 32 >= p.C > (dparams.grid[0] - 1) * 32
                    assert ws == 2 * p.N * p.C * 4
                    continue
                partial, finish, dx = launches
                split = cfg["split_hw"]
                gx, lanes = partial.grid[0], partial.args[-1]
                assert partial.grid[1:] == (split, p.N) and split <= p.HW
                if cfg["layout"] == 0:
                    assert 1 <= lanes <= min(32, t) and gx * lanes >= p.C // vec
                    assert (gx - 1) * lanes < p.C // vec  # no empty tile
                else:
                    assert lanes & (lanes - 1) == 0 and lanes <= t
                    assert gx * (t // lanes) >= p.C > (gx - 1) * (t // lanes)
                    assert lanes <= max(1, -(-(p.HW // vec) // split))
                assert finish.grid[0] == -(-p.N * p.G // (t // 32)) + -(-p.C // 32)
                assert finish.args[-1] == split and dx.args[-1] == split
                assert dx.grid[1] == p.N and dx.grid[0] <= plan.DX_GRID_CAP
                assert ws == (2 * split + 3) * p.N * p.C * 4


def test_reference_launches():
    p = gn(3, 64, 5, 5, 8, "nchw")
    stats, dx, dparams = plan.reference_launches(p)
    assert stats.entry == "groupnorm_bwd_ref_stats" and stats.grid[0] * stats.block[0] >= 24
    assert dx.entry == "groupnorm_bwd_ref_dx" and dparams.entry == "groupnorm_bwd_ref_dparams"
    assert plan.reference_workspace_bytes(p) == 2 * 3 * 8 * 4
    assert plan.gn_params(p).layout == 1 and plan.gn_params(p).HW == 25


# ---- (b) compiles --------------------------------------------------------------------------------
def _code_objects(dtypes=("bf16", "fp16", "fp32"), keep=lambda family, dtype, cfg: True):
    """{(source, sorted defines): (source, defines, [instance names])}, the reference included."""
    out: dict = {}
    for dtype in dtypes:
        d = plan.reference_defines(dtype)
        out[(plan.REFERENCE_SOURCE, tuple(sorted(d.items())))] = (plan.REFERENCE_SOURCE, d,
                                                                  [f"reference_{dtype}"])
        for family in plan.FAMILIES:
            for cfg in plan.configs(family, dtype):
                if not keep(family, dtype, cfg):
                    continue
                d = plan.defines(family, dtype, cfg)
                key = (plan.SOURCES[family], tuple(sorted(d.items())))
                out.setdefault(key, (plan.SOURCES[family], d, []))[2].append(
                    plan.instance_name(family, dtype, cfg))
    return out


def _compile(target, compiler_cls, jobs):
    local, made, lock = threading.local(), [], threading.Lock()

    def one(job):
        source, defines, names = job
        if not hasattr(local, "compiler"):
            local.compiler = compiler_cls()
            with lock:
                made.append(local.compiler)
        return names, defines, local.compiler.compile(load_source(source), defines=defines,
                                                      target=target, timeout_s=300)

    try:
        with ThreadPoolExecutor(max(2, min(4, os.cpu_count() or 2))) as pool:
            return list(pool.map(one, jobs.values()))
    finally:
        for compiler in made:
            compiler.close()


ENTRIES = {plan.REFERENCE_SOURCE: {"groupnorm_bwd_ref_stats", "groupnorm_bwd_ref_dx",
                                   "groupnorm_bwd_ref_dparams", "groupnorm_fwd_stats"},
           plan.SOURCES["gn_onepass"]: {"gn_onepass_main", "gn_onepass_dparams"},
           plan.SOURCES["gn_twopass"]: {"gn_twopass_partial", "gn_twopass_finish",
                                        "gn_twopass_dx"}}


def _check_results(jobs, results, spill_keys):
    failures = []
    for (source, _, _), (names, defines, r) in zip(jobs.values(), results):
        if not r.ok:
            failures.append(f"{names[0]} {defines}: {r.log[-2000:]}")
            continue
        kernels = r.resources.get("kernels", {})
        if not kernels and "ptxas" not in r.log:
            continue  # this compiler gave no resource report (an NVRTC build without -v output)
        if set(kernels) != ENTRIES[source]:
            failures.append(f"{names[0]}: entries {sorted(kernels)}")
        for entry, res in kernels.items():
            if any(res.get(k) for k in spill_keys):
                failures.append(f"{names[0]} {entry}: spills {res}")
    return failures


def test_every_code_object_compiles_for_sm_90a_without_spills():
    """All 166 distinct code objects (35 + 27 ... per dtype; split_hw shares code): NVRTC."""
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    jobs = _code_objects()
    start = time.perf_counter()
    results = _compile("sm_90a", cuda.NvrtcCompiler, jobs)
    failures = _check_results(jobs, results, ("spill_bytes", "local_bytes"))
    assert not failures, "\n".join(failures)
    print(f"\n{len(jobs)} sm_90a code objects in {time.perf_counter() - start:.1f} s")


def test_code_objects_compile_for_gfx90a_without_spills():
    """hipRTC (ROCm 5.2 via hip-python): every bf16 code object and the 256-thread ones of
    fp16 and fp32 (their code differs from bf16's only in conversions and vector widths);
    GN_ALL_GFX90A=1 compiles every one."""
    try:
        from farm.gpu import hip
    except Exception as exc:  # noqa: BLE001 - no hip-python or no hipRTC library here
        pytest.skip(f"hipRTC is not usable here: {exc}")
    everything = os.environ.get("GN_ALL_GFX90A") == "1"
    jobs = _code_objects(keep=lambda family, dtype, cfg: everything or dtype == "bf16"
                         or cfg["threads"] == 256)
    try:
        results = _compile("gfx90a", hip.HiprtcCompiler, jobs)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"hipRTC is not usable here: {exc}")
    if results and not results[0][2].ok and "did not start" in results[0][2].log:
        pytest.skip(results[0][2].log)
    failures = _check_results(jobs, results, ("vgpr_spills", "sgpr_spills", "local_bytes"))
    assert not failures, "\n".join(failures)


# ---- the GPU check's own logic -------------------------------------------------------------------
def test_storage_round_trip():
    values = np.array([0.0, 1.0, -2.5, 3.140625, 1e-3, 65504.0])
    for dtype in ("bf16", "fp16", "fp32"):
        stored = gpu_check.to_storage(values, dtype)
        back = gpu_check.from_storage(stored, dtype)
        np.testing.assert_allclose(back, values, rtol=plan.OUTPUT_EPS[dtype])
    # bf16 rounds to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7
    assert gpu_check.from_storage(gpu_check.to_storage(np.array([1 + 2**-8]), "bf16"),
                                  "bf16")[0] == 1.0


def test_comparison_accepts_rounding_and_catches_errors():
    p = gn(2, 8, 3, 3, 2, "nhwc", "bf16")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (2, 3, 3, 8)) + 0.5
    dy, gamma = rng.uniform(-1, 1, x.shape), rng.uniform(0.25, 1.75, 8)
    mean, rstd = (a.astype(np.float32) for a in groupnorm_fwd_stats(x, 2, EPS, "nhwc"))
    want = dict(zip(("dx", "dgamma", "dbeta"), groupnorm_bwd(x, dy, gamma, mean, rstd, 2)))
    scale = gpu_check.scales(want, x, dy, gamma, mean, rstd, p)
    length = plan.reduction_lengths(p)["dx"]
    rounded = gpu_check.from_storage(gpu_check.to_storage(want["dx"], "bf16"), "bf16")
    assert gpu_check.compare(rounded, want["dx"], scale["dx"], "bf16", length)["ok"]
    wrong = rounded.copy()
    wrong.reshape(-1)[5] += 0.1 * np.abs(want["dx"]).max()
    result = gpu_check.compare(wrong, want["dx"], scale["dx"], "bf16", length)
    assert not result["ok"] and result["first_bad"] == [5]
    nan = rounded.copy()
    nan.reshape(-1)[0] = np.nan
    assert not gpu_check.compare(nan, want["dx"], scale["dx"], "bf16", length)["ok"]


def test_tiny_groups_compare_dx_against_its_terms():
    """C/G * H * W = 3: dx is a part of dy * gamma * rstd, its errors are relative to that."""
    p = gn(3, 12, 1, 1, 4, "nchw", "fp32")
    rng = np.random.default_rng(1)
    x, dy = rng.uniform(-1, 1, (3, 12, 1, 1)) + 0.5, rng.uniform(-1, 1, (3, 12, 1, 1))
    gamma = rng.uniform(0.25, 1.75, 12)
    mean, rstd = (a.astype(np.float32) for a in groupnorm_fwd_stats(x, 4, EPS, "nchw"))
    want = dict(zip(("dx", "dgamma", "dbeta"),
                    groupnorm_bwd(x, dy, gamma, mean, rstd, 4, "nchw")))
    scale = gpu_check.scales(want, x, dy, gamma, mean, rstd, p)
    term = np.abs(dy.reshape(3, 12) * gamma * np.repeat(rstd.reshape(3, 4), 3, axis=1))
    assert scale["dx"][0] >= np.linalg.norm(term) * (1 - 1e-12)
    assert scale["dx"][1] >= term.max() * (1 - 1e-12)
    assert scale["dgamma"] == (np.linalg.norm(want["dgamma"]), np.abs(want["dgamma"]).max())


def test_check_lists_its_shapes(capsys):
    assert gpu_check.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "512x512" in out and "G=4096" in out


def test_a_crash_is_attributed_to_the_running_instance(monkeypatch):
    """The parent reads what the shape process printed: the instance that had started and not
    finished when the process died is the one recorded as crashed."""
    def fake_run_shape(spec):
        gpu_check.emit("START", {"name": "first", "dtype": "bf16"})
        gpu_check.emit("RESULT", {"name": "first", "family": "gn_onepass", "dtype": "bf16",
                                  "checks": {}})
        gpu_check.emit("START", {"name": "second", "dtype": "bf16"})
        raise RuntimeError("illegal_address: simulated")

    monkeypatch.setattr(gpu_check, "run_shape", fake_run_shape)
    results, crashed, log = gpu_check.run_child({}, timeout=10, in_process=True)
    assert [r["name"] for r in results] == ["first"]
    assert crashed == {"name": "second", "dtype": "bf16"}
    assert "an exception" in log and "illegal_address: simulated" in log

    def clean_run_shape(spec):
        gpu_check.emit("DONE", {})

    monkeypatch.setattr(gpu_check, "run_shape", clean_run_shape)
    assert gpu_check.run_child({}, timeout=10, in_process=True)[1] is None
