"""conv_igemm: the descriptor, NumPy models of the kernel's index math and fragment layouts,
every instance compiled (sm_90a with NVRTC; gfx90a with hipRTC where it is usable), and, on a
GPU, every instance checked against a float64 NumPy convolution."""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.igemm import FAMILY, OP_CODES, generate_configs, shared_bytes
from kernels.operator import OUTPUT_EPS

OPS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")
DTYPES = ("bf16", "fp16")


def problem(op, dtype="bf16", **shape):
    base = dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype=dtype, **{**base, **shape})


def instance(op, dtype="bf16", **want):
    for inst in FAMILY.instances(op, dtype):
        if all(inst.settings.get(k) == v for k, v in want.items()):
            return inst
    raise LookupError(want)


# Descriptor -------------------------------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_config_space(op):
    configs = FAMILY.configs(op)
    assert 30 <= len(configs) <= 100  # with the other families: 40 to 150 a direction
    names = [i.name for i in FAMILY.instances(op, "bf16")]
    assert len(set(names)) == len(names)
    for c in configs:
        assert shared_bytes(c) <= 48 * 1024
        assert 128 <= 32 * c["warps_m"] * c["warps_n"] <= 256
        assert c["vec"] in (1, 2, 4, 8) and 2 <= c["stages"] <= 4
        assert ("split_k" in c) == (op == "conv2d_bwd_weight")
    assert {c["vec"] for c in configs} == {1, 2, 4, 8}


def test_defines_carry_the_direction_and_leave_split_k_to_the_launch():
    inst = instance("conv2d_bwd_weight", split_k=16)
    d = FAMILY.defines(inst)
    assert d["IGEMM_OP"] == OP_CODES["conv2d_bwd_weight"] and "SPLIT_K" not in d
    assert d["FARM_DTYPE"] == 2 and d["BLOCK_M"] == inst.settings["block_m"]
    other = instance("conv2d_bwd_weight", **{**inst.settings, "split_k": 64})
    assert FAMILY.defines(other) == d  # one code object for both


def test_applicability_reasons():
    fwd8 = instance("conv2d_fwd", vec=8, block_m=64, block_n=32)
    assert FAMILY.applicable(fwd8, problem("conv2d_fwd")) is None
    assert "fp32" in FAMILY.applicable(fwd8, problem("conv2d_fwd", dtype="fp32"))
    assert "Cg=12" in FAMILY.applicable(fwd8, problem("conv2d_fwd", C=12))
    assert FAMILY.applicable(instance("conv2d_fwd", vec=4, block_m=64, block_n=32),
                             problem("conv2d_fwd", C=12)) is None
    assert FAMILY.applicable(instance("conv2d_fwd", vec=1, block_n=32),
                             problem("conv2d_fwd", C=3)) is None
    # bwd_data loads along K/G (dy) and C/G (w); bwd_weight along K/G (dy) and C/G (x)
    for op in ("conv2d_bwd_data", "conv2d_bwd_weight"):
        reason = FAMILY.applicable(instance(op, vec=8, block_m=64, block_n=64),
                                   problem(op, K=20))
        assert reason and "Kg=20" in reason
    big = instance("conv2d_fwd", block_n=256)
    assert "block_n=256" in FAMILY.applicable(big, problem("conv2d_fwd", K=32))
    assert "conv2d_bwd_data" in FAMILY.applicable(fwd8, problem("conv2d_bwd_data"))


@pytest.mark.parametrize("op", OPS)
def test_launch_geometry_covers_the_output(op):
    shapes = [dict(), dict(N=3, H=13, W=7, K=96, C=48, stride_h=2, stride_w=3),
              dict(G=4, C=64, K=32, R=1, S=1, pad_h=0, pad_w=0)]
    for shape, inst in itertools.product(shapes, FAMILY.instances(op, "bf16")):
        p, c = problem(op, **shape), inst.settings
        launches = FAMILY.launches(inst, p)
        main = [l for l in launches if l.entry in (op, "igemm_bwd_weight_split")]
        assert len(main) == 1
        (gx, gy, gz), block = main[0].grid, main[0].block
        assert block == (32 * c["warps_m"] * c["warps_n"], 1, 1) and gy == 1
        m, n, k = p.gemm
        rows = FAMILY.gemm_rows(p)
        assert rows >= (m if op != "conv2d_bwd_data" else -(-m // (p.stride_h * p.stride_w)))
        assert gx == -(-rows // c["block_m"]) * -(-n // c["block_n"])
        assert gx * c["block_m"] * c["block_n"] >= rows * n
        if op == "conv2d_bwd_weight":
            splits, per = FAMILY.splits(inst, p)
            assert gz == p.G * splits
            assert (splits - 1) * per < -(-k // c["block_k"]) <= splits * per  # none empty
            if splits > 1:
                assert [l.entry for l in launches] == ["igemm_zero", "igemm_bwd_weight_split",
                                                       "igemm_reduce"]
                assert FAMILY.workspace_bytes(inst, p) == 4 * p.tensor_elements()["weight"]
            else:
                assert len(launches) == 1 and FAMILY.workspace_bytes(inst, p) == 0
        elif op == "conv2d_bwd_data":
            assert gz == p.G * p.stride_h * p.stride_w
        else:
            assert gz == p.G


# NumPy models of the kernel -----------------------------------------------------------------
def reference(op, p, a, b):
    """Float64 convolution of each direction on flat NHWGC / GKYXC / NHWGK arrays."""
    cg, kg = p.c_per_group, p.k_per_group
    xs, ws, ys = (p.N, p.H, p.W, p.G, cg), (p.G, kg, p.R, p.S, cg), (p.N, p.P, p.Q, p.G, kg)
    ph = (p.P - 1) * p.stride_h + 1
    pw = (p.Q - 1) * p.stride_w + 1
    pad = ((0, 0), (p.pad_h, p.pad_h + p.H), (p.pad_w, p.pad_w + p.W), (0, 0), (0, 0))

    def window(r, s):
        h0, w0 = r * p.dil_h, s * p.dil_w
        return (slice(None), slice(h0, h0 + ph, p.stride_h), slice(w0, w0 + pw, p.stride_w))

    if op == "conv2d_fwd":
        x, w = np.pad(a.reshape(xs), pad), b.reshape(ws)
        out = np.zeros(ys)
        for r, s in itertools.product(range(p.R), range(p.S)):
            out += np.einsum("npqgc,gkc->npqgk", x[window(r, s)], w[:, :, r, s])
        return out.ravel()
    if op == "conv2d_bwd_data":
        dy, w = a.reshape(ys), b.reshape(ws)
        out = np.pad(np.zeros(xs), pad)
        for r, s in itertools.product(range(p.R), range(p.S)):
            out[window(r, s)] += np.einsum("npqgk,gkc->npqgc", dy, w[:, :, r, s])
        return out[:, p.pad_h:p.pad_h + p.H, p.pad_w:p.pad_w + p.W].ravel()
    x, dy = np.pad(a.reshape(xs), pad), b.reshape(ys)
    out = np.zeros(ws)
    for r, s in itertools.product(range(p.R), range(p.S)):
        out[:, :, r, s] = np.einsum("npqgk,npqgc->gkc", dy, x[window(r, s)])
    return out.ravel()


def taps(rh, pad, dil, stride, R):
    """Taps.init of igemm.cu: (first tap, step, count, shift0, dshift) of residue rh: taps
    r0 + j*step hit output row h / stride + shift0 - j * dshift exactly."""
    a, b = stride, dil
    while b:
        a, b = b, a % b
    step, r0 = stride // a, R
    for r in range(min(R, step)):
        if (rh + pad - r * dil) % stride == 0:
            r0 = r
            break
    count = (R - 1 - r0) // step + 1 if r0 < R else 0
    shift0 = (rh + pad - r0 * dil) // stride if count else 0
    return r0, step, count, shift0, dil // a


class FastDiv:
    """FastDiv of igemm.cu in 32-bit unsigned arithmetic."""

    def __init__(self, d):
        self.d = d
        if d <= 1:
            self.mul = self.shr = 0
        else:
            ceil_log2 = (d - 1).bit_length()
            self.mul = ((1 << (31 + ceil_log2)) + d - 1) // d
            assert self.mul < 2**32
            self.shr = ceil_log2 - 1

    def div(self, n):
        n = np.asarray(n, dtype=np.uint64)
        return n if self.d == 1 else (n * np.uint64(self.mul)) >> np.uint64(32 + self.shr)


def test_fast_division_is_exact_below_2_to_31():
    rng = np.random.default_rng(5)
    n = np.concatenate([np.arange(5000), rng.integers(0, 2**31, 20000), [2**31 - 1]])
    for d in [1, 2, 3, 5, 7, 9, 12, 25, 49, 96, 100, 784, 1000, 3136, 12544, 65537,
              *rng.integers(2, 2**31, 40)]:
        got = FastDiv(int(d)).div(n)
        np.testing.assert_array_equal(got, n // int(d), err_msg=f"d={d}")


def gather(t, idx, valid):
    return np.where(valid, t[np.where(valid, idx, 0)], 0.0)


def model(op, p, a, b, block_k=32, split_k=1):
    """The output as the kernel computes it: per group (and residue) A and B gathered with the
    loaders' index formulas, then C = A @ B scattered with the epilogue's row offsets."""
    cg, kg, crs, npq = p.c_per_group, p.k_per_group, p.c_per_group * p.R * p.S, p.N * p.P * p.Q
    sh, sw = p.stride_h, p.stride_w
    if op == "conv2d_fwd":
        out = np.full(p.tensor_elements()["output"], np.nan)
        m, kk = np.arange(npq)[:, None], np.arange(crs)[None, :]
        n, pq = m // (p.P * p.Q), m % (p.P * p.Q)
        c, rs = kk % cg, kk // cg
        h = (pq // p.Q) * sh - p.pad_h + (rs // p.S) * p.dil_h
        w = (pq % p.Q) * sw - p.pad_w + (rs % p.S) * p.dil_w
        valid = (h >= 0) & (h < p.H) & (w >= 0) & (w < p.W)
        j = np.arange(kg)
        for g in range(p.G):
            A = gather(a, n * p.H * p.W * p.C + g * cg + (h * p.W + w) * p.C + c, valid)
            B = b[((g * kg + j)[:, None] * crs + np.arange(crs)[None, :])]
            out[(m * p.K + g * kg + j[None, :]).ravel()] = (A @ B.T).ravel()
        return out
    if op == "conv2d_bwd_data":
        out = np.full(p.tensor_elements()["input"], np.nan)
        for g, rh, rw in itertools.product(range(p.G), range(sh), range(sw)):
            hr = -(-(p.H - rh) // sh) if rh < p.H else 0
            wr = -(-(p.W - rw) // sw) if rw < p.W else 0
            r0h, sth, cnth, sh0, dsh = taps(rh, p.pad_h, p.dil_h, sh, p.R)
            r0w, stw, cntw, sw0, dsw = taps(rw, p.pad_w, p.dil_w, sw, p.S)
            M, Kt = p.N * hr * wr, cnth * cntw * kg
            if M == 0:
                continue
            m = np.arange(M)[:, None]
            n, t = m // (hr * wr), m % (hr * wr)
            hi, wi = t // wr, t % wr
            cols = np.arange(cg)[None, :]
            rows = (((n * p.H + rh + hi * sh) * p.W + rw + wi * sw) * p.C + g * cg + cols)
            if Kt == 0:
                out[rows.ravel()] = 0.0
                continue
            kk = np.arange(Kt)[None, :]
            k, jj = kk % kg, kk // kg
            r, s = r0h + (jj // cntw) * sth, r0w + (jj % cntw) * stw
            assert np.all((rh + p.pad_h - r * p.dil_h) % sh == 0)
            oh = hi + sh0 - (jj // cntw) * dsh
            ow = wi + sw0 - (jj % cntw) * dsw
            assert np.all(oh == hi + (rh + p.pad_h - r * p.dil_h) // sh)
            valid = (oh >= 0) & (oh < p.P) & (ow >= 0) & (ow < p.Q)
            A = gather(a, n * p.P * p.Q * p.K + g * kg + (oh * p.Q + ow) * p.K + k, valid)
            B = b[(((g * kg + k.T) * p.R + r.T) * p.S + s.T) * cg + cols]
            assert np.all(np.isnan(out[rows.ravel()]))  # each dx element written once
            out[rows.ravel()] = (A @ B).ravel()
        return out
    out = np.zeros(p.tensor_elements()["weight"])
    kt_total = -(-npq // block_k)
    per = -(-kt_total // max(1, min(split_k, kt_total)))
    j = np.arange(crs)[None, :]
    c, rs = j % cg, j // cg
    hoff, woff = (rs // p.S) * p.dil_h - p.pad_h, (rs % p.S) * p.dil_w - p.pad_w
    covered = np.zeros(npq, int)
    for g, kt0 in itertools.product(range(p.G), range(0, kt_total, per)):
        kk = np.arange(kt0 * block_k, min((kt0 + per) * block_k, npq))[:, None]
        covered[kk.ravel()] += g == 0
        n, t = kk // (p.P * p.Q), kk % (p.P * p.Q)
        h, w = (t // p.Q) * sh + hoff, (t % p.Q) * sw + woff
        valid = (h >= 0) & (h < p.H) & (w >= 0) & (w < p.W)
        A = b[kk * p.K + g * kg + np.arange(kg)[None, :]]  # dy: [kk][m]
        B = gather(a, ((n * p.H + h) * p.W + w) * p.C + g * cg + c, valid)  # x
        out[((g * kg + np.arange(kg))[:, None] * crs + j).ravel()] += (A.T @ B).ravel()
    assert np.all(covered == 1)  # the split slices cover the reduction once
    return out


MODEL_SHAPES = [
    dict(N=2, C=16, K=24, G=1, H=7, W=9, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=12, K=8, G=2, H=9, W=8, R=3, S=2, stride_h=2, stride_w=3, pad_h=1, pad_w=2),
    dict(N=2, C=8, K=8, G=4, H=10, W=7, R=3, S=3, dil_h=2, dil_w=3, pad_h=2, pad_w=1,
         stride_h=3, stride_w=2),
    dict(N=2, C=6, K=4, G=1, H=6, W=6, R=1, S=1, stride_h=2, stride_w=2),
    dict(N=1, C=4, K=4, G=1, H=1, W=5, R=1, S=3, stride_h=3, stride_w=2, pad_w=1),
    dict(N=1, C=4, K=6, G=2, H=5, W=5, R=5, S=4, stride_h=2, stride_w=2, pad_h=2, pad_w=3,
         dil_h=2),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", MODEL_SHAPES)
def test_index_model_matches_the_reference(op, shape):
    p = ConvProblem(op=op, **shape)
    rng = np.random.default_rng(7)
    sizes = p.tensor_elements()
    names = {"conv2d_fwd": ("input", "weight"), "conv2d_bwd_data": ("output", "weight"),
             "conv2d_bwd_weight": ("input", "output")}[op]
    a, b = (rng.uniform(-1, 1, sizes[n]) for n in names)
    want = reference(op, p, a, b)
    for split in ((1, 2, 5) if op == "conv2d_bwd_weight" else (1,)):
        got = model(op, p, a, b, block_k=4, split_k=split)
        assert not np.any(np.isnan(got)), "an output element was never written"
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def swz(row, col, cols):
    f = (row & 7) if cols >= 64 else ((row >> 1) & 3)
    return row * cols + (((col >> 3) ^ f) << 3) + (col & 7)


def ldmatrix_x4(smem, addresses, trans):
    """PTX ldmatrix .x4 .b16: lane 8j+i names row i of matrix j; lane t gets, of each matrix,
    row t/4, elements 2(t%4) and 2(t%4)+1 (of the transpose with .trans)."""
    mats = np.stack([np.stack([smem[addresses[8 * j + i]:addresses[8 * j + i] + 8]
                               for i in range(8)]) for j in range(4)])
    if trans:
        mats = mats.transpose(0, 2, 1)
    return [[(mats[j, t // 4, 2 * (t % 4)], mats[j, t // 4, 2 * (t % 4) + 1])
             for j in range(4)] for t in range(32)]


def conflict_free(addresses):
    """Each phase of 8 16-byte row reads covers the 8 bank groups once."""
    return all(len({(a * 2 // 16) % 8 for a in addresses[8 * j:8 * j + 8]}) == 8
               for j in range(4))


@pytest.mark.parametrize("k_major", [True, False])
@pytest.mark.parametrize("dim, bk", [(128, 32), (64, 64), (32, 32), (256, 32)])
def test_ldmatrix_addressing_gives_mma_fragments(k_major, dim, bk):
    """The kernel's ldmatrix addresses over the swizzled tile hand mma.m16n8k16 exactly the
    A (16x16, row) and B (16x8, col) fragments of the logical tile, without bank conflicts."""
    rng = np.random.default_rng(1)
    logical = rng.integers(0, 1 << 15, (dim, bk))  # [m or n][k]
    rows, cols = (dim, bk) if k_major else (bk, dim)
    smem = np.full(rows * cols, -1)
    for x, k in itertools.product(range(dim), range(bk)):
        smem[swz(x, k, cols) if k_major else swz(k, x, cols)] = logical[x, k]
    assert np.all(smem >= 0)  # the swizzle is a bijection
    for base, ks in itertools.product(range(0, dim, 16), range(bk // 16)):
        # A operand (rows base..base+15, k ks*16..+15)
        if k_major:
            addr = [swz(base + (l & 15), ks * 16 + (l >> 4) * 8, cols) for l in range(32)]
        else:
            addr = [swz(ks * 16 + ((l >> 3) >> 1) * 8 + (l & 7), base + ((l >> 3) & 1) * 8, cols)
                    for l in range(32)]
        assert conflict_free(addr)
        frag = ldmatrix_x4(smem, addr, trans=not k_major)
        tile = logical[base:base + 16, ks * 16:ks * 16 + 16]
        for lane in range(32):
            g, t = lane // 4, lane % 4
            want = [(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8)]
            for reg, (i, k) in enumerate(want):
                assert frag[lane][reg] == (tile[i, k], tile[i, k + 1])
        # B operand (two n8 tiles at base, base + 8)
        if k_major:
            addr = [swz(base + (l >> 4) * 8 + (l & 7), ks * 16 + ((l >> 3) & 1) * 8, cols)
                    for l in range(32)]
        else:
            addr = [swz(ks * 16 + ((l >> 3) & 1) * 8 + (l & 7), base + (l >> 4) * 8, cols)
                    for l in range(32)]
        assert conflict_free(addr)
        frag = ldmatrix_x4(smem, addr, trans=not k_major)
        for lane, half in itertools.product(range(32), range(2)):
            g, t = lane // 4, lane % 4
            n = base + half * 8 + g
            b0, b1 = frag[lane][2 * half], frag[lane][2 * half + 1]
            k0 = ks * 16 + 2 * t
            assert b0 == (logical[n, k0], logical[n, k0 + 1])
            assert b1 == (logical[n, k0 + 8], logical[n, k0 + 9])


@pytest.mark.parametrize("dim, bk", [(128, 32), (64, 64), (256, 32)])
def test_mfma_operand_reads_give_four_consecutive_k(dim, bk):
    """read4 of the AMD path: a K-major tile's 4 elements at k % 4 == 0 stay contiguous under
    the swizzle (one 8-byte LDS read); an M/N-major tile is read element by element."""
    for x, k in itertools.product(range(dim), range(0, bk, 4)):
        base = swz(x, k, bk)
        assert base % 4 == 0
        assert [swz(x, k + e, bk) for e in range(4)] == [base + e for e in range(4)]


@pytest.mark.parametrize("op", OPS)
def test_loaders_write_every_tile_element_once(op):
    """Lanes<ROWS, COLS>: thread tid, pass i covers row tid / TPR + i * RPP, columns
    (tid % TPR) * VEC ..+VEC; over the block that is each element of the tile once."""
    for c in FAMILY.configs(op):
        threads, vec = 32 * c["warps_m"] * c["warps_n"], c["vec"]
        a_k, b_k = op != "conv2d_bwd_weight", op == "conv2d_fwd"
        for rows, cols in ((c["block_m"], c["block_k"]) if a_k else (c["block_k"], c["block_m"]),
                           (c["block_n"], c["block_k"]) if b_k else (c["block_k"], c["block_n"])):
            tpr = cols // vec
            rpp = threads // tpr
            seen = np.zeros(rows * cols, int)
            for tid, i in itertools.product(range(threads), range(rows // rpp)):
                r, col = tid // tpr + i * rpp, (tid % tpr) * vec
                off = swz(r, col, cols)
                assert off % vec == 0  # vector-aligned in shared memory
                seen[off:off + vec] += 1
            assert np.all(seen == 1)


def test_epilogue_and_mfma_maps_cover_the_tile_once():
    for wtm, wtn in ((64, 32), (32, 64), (64, 64), (32, 16)):  # mma.sync C fragments
        seen = np.zeros((wtm, wtn), int)
        for lane, mi, half, ni, e in itertools.product(range(32), range(wtm // 16), range(2),
                                                       range(wtn // 8), range(2)):
            seen[mi * 16 + lane // 4 + half * 8, ni * 8 + (lane % 4) * 2 + e] += 1
        assert np.all(seen == 1)
    for bn in (32, 64, 128, 256):  # staged epilogue: rows padded to bn + 8 elements
        for mi, half, ni in itertools.product(range(4), range(2), range(bn // 8 // 2)):
            banks = {((mi * 16 + lane // 4 + half * 8) * (bn + 8) + ni * 8 + (lane % 4) * 2)
                     // 2 % 32 for lane in range(32)}
            assert len(banks) == 32  # one u32 store per lane, no two lanes in one bank
    seen = np.zeros((32, 32), int)  # MFMA 32x32x8 D: lane l, element e
    for lane, e in itertools.product(range(64), range(16)):
        seen[(e >> 2) * 8 + (lane >> 5) * 4 + (e & 3), lane & 31] += 1
    assert np.all(seen == 1)
    # MFMA A/B operands: lane l holds row l%32, k (l/32)*4 .. +3 of the 32x8 slice
    ks = {(lane % 32, (lane // 32) * 4 + e) for lane in range(64) for e in range(4)}
    assert ks == set(itertools.product(range(32), range(8)))


# Compiling every instance -----------------------------------------------------------------
def unique_modules():
    """(defines, instance names) of every distinct code object of every direction and dtype."""
    modules: dict[tuple, list[str]] = {}
    for op, dtype in itertools.product(OPS, DTYPES):
        for inst in FAMILY.instances(op, dtype):
            modules.setdefault(tuple(sorted(FAMILY.defines(inst).items())), []).append(inst.name)
    return [(dict(k), v) for k, v in modules.items()]


def compile_all(target, compiler_cls, modules, workers):
    source = FAMILY.source()
    local = threading.local()
    made = []

    def one(item):
        if not hasattr(local, "compiler"):
            local.compiler = compiler_cls()
            made.append(local.compiler)
        defines, names = item
        return names, local.compiler.compile(source, defines=defines, target=target,
                                             timeout_s=300)

    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, modules))
    finally:
        for compiler in made:
            getattr(compiler, "close", lambda: None)()


def _workers():
    return max(2, min(8, os.cpu_count() or 2))


def test_every_instance_compiles_for_sm_90a_without_spills():
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    modules = unique_modules()
    start = time.perf_counter()
    results = compile_all("sm_90a", cuda.NvrtcCompiler, modules, _workers())
    failures, regs = [], []
    for names, r in results:
        if not r.ok:
            failures.append(f"{names[0]}: {r.log[-2000:]}")
            continue
        for entry, res in r.resources["kernels"].items():
            if entry not in ("igemm_zero", "igemm_reduce"):
                regs.append(res["registers"])
            if res.get("spill_bytes", 0) or res.get("local_bytes", 0):
                failures.append(f"{names[0]} {entry}: spills {res}")
            if res.get("shared_bytes", 0) > 48 * 1024:
                failures.append(f"{names[0]} {entry}: shared {res['shared_bytes']}")
    assert not failures, "\n".join(failures)
    print(f"\n{len(modules)} modules ({sum(len(n) for _, n in modules)} instances) in "
          f"{time.perf_counter() - start:.0f} s; registers {min(regs)}..{max(regs)}")


def test_configs_compile_for_gfx90a():
    """hipRTC (ROCm 5.2 through hip-python), bf16: every tile of every direction at vec=8 and
    every vec on the small tiles; fp16 for one configuration per direction (its only difference
    is the MFMA builtin). IGEMM_ALL_GFX90A=1 compiles every instance instead."""
    try:
        from farm.gpu import hip
    except Exception as exc:  # noqa: BLE001 - no hip-python or no hipRTC library here
        pytest.skip(f"hipRTC is not usable here: {exc}")
    first_fp16 = [dict(FAMILY.defines(FAMILY.instances(op, "fp16")[0])) for op in OPS]
    modules = [(d, n) for d, n in unique_modules()
               if os.environ.get("IGEMM_ALL_GFX90A") == "1" or d in first_fp16
               or d["FARM_DTYPE"] == 2 and (d["VEC"] == 8 or d["BLOCK_M"] * d["BLOCK_N"] <= 4096)]
    try:
        results = compile_all("gfx90a", hip.HiprtcCompiler, modules, _workers())
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"hipRTC is not usable here: {exc}")
    if results and not results[0][1].ok and "did not start" in results[0][1].log:
        pytest.skip(results[0][1].log)
    failures = [f"{n[0]}: {r.log[-2000:]}" for n, r in results if not r.ok]
    failures += [f"{n[0]}: spills {r.resources}" for n, r in results if r.ok and (
        r.resources.get("vgpr_spills") or r.resources.get("sgpr_spills")
        or r.resources.get("local_bytes"))]
    assert not failures, "\n".join(failures)


# On a GPU: every instance against NumPy ---------------------------------------------------
GPU_SHAPES = {
    "conv2d_fwd": [
        dict(N=2, C=64, K=48, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=1, C=96, K=64, G=2, H=7, W=10, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=2, C=32, K=40, G=4, H=8, W=8, R=3, S=2, dil_h=2, dil_w=2, pad_h=2, pad_w=1,
             stride_w=2),
        dict(N=1, C=256, K=128, G=1, H=6, W=6, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=4, C=64, K=272, G=1, H=12, W=12, R=1, S=1),
        dict(N=2, C=24, K=20, G=2, H=6, W=7, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=2, C=6, K=34, G=2, H=7, W=7, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=8, C=36, K=36, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    ],
    "conv2d_bwd_data": [
        dict(N=2, C=64, K=48, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=1, C=96, K=64, G=2, H=7, W=10, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=2, C=64, K=32, G=1, H=8, W=9, R=1, S=1, stride_h=2, stride_w=2),
        dict(N=1, C=32, K=48, G=2, H=11, W=11, R=3, S=3, stride_h=3, stride_w=3, dil_h=2,
             dil_w=2, pad_h=2, pad_w=2),
        dict(N=4, C=272, K=64, G=1, H=12, W=12, R=1, S=1),
        dict(N=1, C=128, K=256, G=1, H=6, W=6, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=2, C=20, K=24, G=2, H=6, W=7, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=2, C=34, K=18, G=2, H=7, W=7, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=8, C=36, K=36, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    ],
    "conv2d_bwd_weight": [
        dict(N=2, C=64, K=48, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=8, C=64, K=96, G=1, H=16, W=16, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=1, C=96, K=64, G=2, H=7, W=10, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=2, C=32, K=48, G=2, H=11, W=11, R=3, S=3, stride_h=3, stride_w=2, dil_h=2,
             pad_h=2, pad_w=1),
        dict(N=4, C=272, K=320, G=1, H=6, W=6, R=1, S=1),
        dict(N=2, C=20, K=36, G=2, H=6, W=7, R=3, S=3, pad_h=1, pad_w=1),
        dict(N=2, C=34, K=18, G=2, H=7, W=7, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
        dict(N=8, C=35, K=37, G=1, H=9, W=9, R=3, S=3, pad_h=1, pad_w=1),
    ],
}


def to_bits(values, dtype):
    if dtype == "fp16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bits(bits, dtype):
    if dtype == "fp16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.gpu
def test_every_instance_matches_numpy_on_a_gpu():
    from farm.gpu import KernelArgs, get_compiler, list_devices, open_device

    if not list_devices():
        pytest.skip("no GPU on this machine")
    device = open_device()
    arch = device.fingerprint()["arch"]
    target = "sm_90a" if arch == "sm_90" else arch
    compiled = compile_all(target, type(get_compiler(target)), unique_modules(), _workers())
    modules = {}
    for (defines, names), (_, result) in zip(unique_modules(), compiled):
        assert result.ok, f"{names[0]}: {result.log}"
        modules[tuple(sorted(defines.items()))] = device.load_module(result.code)
    verified: dict[str, int] = {}
    failures: list[str] = []
    rng = np.random.default_rng(3)
    for op, dtype in itertools.product(OPS, DTYPES):
        for shape in GPU_SHAPES[op]:
            p = ConvProblem(op=op, dtype=dtype, **shape)
            tensors = {"conv2d_fwd": ("x", "w", "y"), "conv2d_bwd_data": ("dy", "w", "dx"),
                       "conv2d_bwd_weight": ("x", "dy", "dw")}[op]
            kinds = {"x": "input", "dx": "input", "w": "weight", "dw": "weight", "y": "output",
                     "dy": "output"}
            sizes = {t: p.tensor_elements()[kinds[t]] for t in tensors}
            host = {t: to_bits(rng.uniform(-1, 1, sizes[t]), dtype) for t in tensors[:2]}
            want = reference(op, p, *(from_bits(host[t], dtype) for t in tensors[:2]))
            ptrs = {t: device.alloc(2 * sizes[t]) for t in tensors}
            for t in tensors[:2]:
                device.copy_to_device(ptrs[t], host[t])
            ws = 0
            for inst in FAMILY.instances(op, dtype):
                if FAMILY.applicable(inst, p):
                    continue
                key = tuple(sorted(FAMILY.defines(inst).items()))
                need = FAMILY.workspace_bytes(inst, p)
                if need > ws:
                    ptrs["workspace"], ws = device.alloc(need), need
                device.memset(ptrs[tensors[2]], 0xFF, 2 * sizes[tensors[2]])  # NaN poison
                for launch in FAMILY.launches(inst, p):
                    args = [("ptr", ptrs[a]) if isinstance(a, str) else
                            ("i32", a) if isinstance(a, int) else ("bytes", bytes(a))
                            for a in launch.args]
                    device.launch(device.function(modules[key], launch.entry), launch.grid,
                                  launch.block, launch.shared_bytes, KernelArgs.pack(args))
                device.synchronize()
                got = from_bits(device.copy_from_device(ptrs[tensors[2]], 2 * sizes[tensors[2]])
                                .view(np.uint16), dtype)
                err = np.abs(got - want)
                rel_l2 = np.linalg.norm(got - want) / np.linalg.norm(want)
                rel_max = err.max() / np.abs(want).max()
                eps = OUTPUT_EPS[dtype]
                if not np.all(np.isfinite(got)) or rel_l2 > 2 * eps or rel_max > 2 * eps:
                    bad = np.flatnonzero(~(err <= 2 * eps * np.abs(want).max()))
                    failures.append(f"{inst.name} {p.label()}: rel_l2 {rel_l2:.3g} rel_max "
                                    f"{rel_max:.3g}, {bad.size} bad of {got.size}, first "
                                    f"{bad[:8].tolist()}")
                verified[inst.name] = verified.get(inst.name, 0) + 1
            for ptr in ptrs.values():
                device.free(ptr)
    unverified = [i.name for op, d in itertools.product(OPS, DTYPES)
                  for i in FAMILY.instances(op, d) if i.name not in verified]
    device.close()
    assert not failures, f"{len(failures)} wrong:\n" + "\n".join(failures[:60])
    assert not unverified, f"{len(unverified)} never applicable: {unverified[:20]}"


def test_generated_configs_are_stable():
    assert generate_configs("conv2d_fwd") == FAMILY.configs("conv2d_fwd")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("c, k", [(16, 64), (8, 64), (6, 144), (3, 32)])
def test_narrow_gemms_keep_an_instance(op, c, k):
    """A tile larger than a small GEMM dimension is refused only where a smaller one exists."""
    p = ConvProblem(op=op, dtype="bf16", N=32, C=c, K=k, G=1, H=56, W=56, R=1, S=1)
    assert any(FAMILY.applicable(i, p) is None for i in FAMILY.instances(op, "bf16"))
