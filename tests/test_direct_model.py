"""conv_direct without a GPU: a NumPy emulation of every kernel's index math (thread mapping,
tiles, staged taps, shared-memory tiles, phases, split reduction), run over each instance's real
launch geometry on tiny shapes and compared with a NumPy convolution.

The emulation follows kernels/conv/direct.cu statement by statement for the indices, and checks
what a GPU would only show as a crash or garbage: every load in bounds and aligned to its vector,
every output written exactly once, shared memory within what the launch asks for.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.direct import FAMILY, DirectConv

DT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


# ---- reference -----------------------------------------------------------------------------
def _windows(xpad, p, r, s):
    """x[n, oh*sh + r*dh, ow*sw + s*dw, :] over the padded input: (N, P, Q, C)."""
    h0, w0 = r * p.dil_h, s * p.dil_w
    return xpad[:, h0:h0 + p.stride_h * (p.P - 1) + 1:p.stride_h,
                w0:w0 + p.stride_w * (p.Q - 1) + 1:p.stride_w, :]


def reference(p: ConvProblem, x, w, dy):
    """Float64 convolution by its definition; x NHWC, w (K, R, S, Cg), dy NPQK."""
    G, cg, kg = p.G, p.c_per_group, p.k_per_group
    wg = w.reshape(G, kg, p.R, p.S, cg)
    xpad = np.zeros((p.N, p.H + 2 * p.pad_h, p.W + 2 * p.pad_w, p.C))
    xpad[:, p.pad_h:p.pad_h + p.H, p.pad_w:p.pad_w + p.W] = x
    if p.op == "conv2d_fwd":
        y = np.zeros((p.N, p.P, p.Q, G, kg))
        for r in range(p.R):
            for s in range(p.S):
                xs = _windows(xpad, p, r, s).reshape(p.N, p.P, p.Q, G, cg)
                y += np.einsum("npqgc,gkc->npqgk", xs, wg[:, :, r, s, :])
        return y.reshape(p.N, p.P, p.Q, p.K)
    dyg = dy.reshape(p.N, p.P, p.Q, G, kg)
    if p.op == "conv2d_bwd_data":
        dxpad = np.zeros_like(xpad)
        for r in range(p.R):
            for s in range(p.S):
                view = _windows(dxpad, p, r, s)
                view += np.einsum("npqgk,gkc->npqgc", dyg, wg[:, :, r, s, :]).reshape(view.shape)
        return dxpad[:, p.pad_h:p.pad_h + p.H, p.pad_w:p.pad_w + p.W]
    dw = np.zeros((G, kg, p.R, p.S, cg))
    for r in range(p.R):
        for s in range(p.S):
            xs = _windows(xpad, p, r, s).reshape(p.N, p.P, p.Q, G, cg)
            dw[:, :, r, s, :] = np.einsum("npqgk,npqgc->gkc", dyg, xs)
    return dw.reshape(p.K, p.R, p.S, cg)


# ---- emulation -----------------------------------------------------------------------------
class Memory:
    """A flat tensor that checks bounds and vector alignment of every access."""

    def __init__(self, name, array, vec_align=True):
        self.name, self.flat, self.vec_align = name, np.asarray(array, float).ravel(), vec_align

    def load(self, index, n):
        assert 0 <= index and index + n <= self.flat.size, f"{self.name}[{index}:+{n}] out of range"
        assert not self.vec_align or index % n == 0, f"{self.name}[{index}] not aligned to {n}"
        return self.flat[index:index + n]


class Output:
    def __init__(self, name, size):
        self.name, self.flat, self.writes = name, np.full(size, np.nan), np.zeros(size, int)

    def store(self, index, values):
        n = len(values)
        assert 0 <= index and index + n <= self.flat.size, f"{self.name}[{index}:+{n}] out of range"
        assert index % n == 0, f"{self.name}[{index}] store not aligned to {n}"
        self.flat[index:index + n] = values
        self.writes[index:index + n] += 1


def cdiv(a, b):
    return -(-a // b)


def c_div(a, b):
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def c_rem(a, b):
    return a - b * c_div(a, b)


class Emulator:
    def __init__(self, inst, p: ConvProblem):
        self.cfg, self.p, self.op = inst.settings, p, inst.operator
        self.plan = FAMILY.plan(inst, p)
        c = self.cfg
        self.BLOCK, self.VEC, self.KPT = c["block"], c["vec"], c["kpt"]
        self.GROUPED, self.TILE_W, self.FR = c["grouped"], c["tile_w"], c["fr"]
        self.SMEM, self.RB = c.get("smem", 0), c.get("rb", 0)
        self.UNIT = self.KPT if self.GROUPED else self.VEC
        self.eb = DT_BYTES[p.dtype]

    # taps staged for channel slice `by`: ws[(tap * Cig + ic) * WL + ol]
    def stage_taps(self, w: Memory, by, cub, reversed_):
        p, WL = self.p, cub * self.UNIT
        base, RS = by * WL, p.R * p.S
        inner = RS * (p.k_per_group if reversed_ else p.c_per_group)
        ws = np.full(WL * inner, np.nan)
        for i in range(WL * inner):
            if not reversed_:
                ol, rem = divmod(i, inner)
                ws[rem * WL + ol] = w.load(base * inner + i, 1)[0] if base + ol < p.K else 0.0
            else:
                ol, rem = i % WL, i // WL
                tap, k = divmod(rem, p.k_per_group)
                cc = base + ol
                v = 0.0
                if cc < p.C:
                    g, cidx = divmod(cc, p.c_per_group)
                    v = w.load(((g * p.k_per_group + k) * RS + (RS - 1 - tap)) * p.c_per_group
                               + cidx, 1)[0]
                ws[i] = v
        assert not np.isnan(ws).any()
        return ws

    def corr(self, reversed_):
        p = self.p
        if not reversed_:
            return dict(N=p.N, Hi=p.H, Wi=p.W, Ho=p.P, Wo=p.Q, Ci=p.C, Co=p.K,
                        Cig=p.c_per_group, Cog=p.k_per_group, R=p.R, S=p.S, sh=p.stride_h,
                        sw=p.stride_w, ph=p.pad_h, pw=p.pad_w, dh=p.dil_h, dw=p.dil_w)
        return dict(N=p.N, Hi=p.P, Wi=p.Q, Ho=p.H, Wo=p.W, Ci=p.K, Co=p.C, Cig=p.k_per_group,
                    Cog=p.c_per_group, R=p.R, S=p.S, sh=1, sw=1,
                    ph=(p.R - 1) * p.dil_h - p.pad_h, pw=(p.S - 1) * p.dil_w - p.pad_w,
                    dh=p.dil_h, dw=p.dil_w)

    def swc(self, c):
        return 1 if self.FR and c["dw"] == 1 and c["sw"] == 1 else 0

    def corr_row(self, acc, row_mem, row_base, hv, rowlen, col_stride, wrow, WL, ol0, Cig, S,
                 sw, pw, dw, q0, qmax, swc):
        """kernels: corr_row<SWC>; row_base is the element index of (row, column 0, channel)."""
        VEC, KPT, TW = self.VEC, self.KPT, self.TILE_W
        if swc:
            SS, win = self.FR, (TW - 1) * swc + self.FR
            col0 = q0 * swc - pw
            for ic0 in range(0, Cig if self.GROUPED else 1, VEC):
                xin = np.zeros((win, VEC))
                for j in range(win):
                    col = col0 + j
                    if hv and 0 <= col < rowlen:
                        xin[j] = row_mem.load(row_base + col * col_stride + ic0, VEC)
                for s in range(SS):
                    if self.GROUPED:
                        for v in range(VEC):
                            wk = wrow[(s * Cig + ic0 + v) * WL + ol0:][:KPT]
                            for t in range(TW):
                                acc[t] += xin[t * swc + s][v] * wk
                    else:
                        wk = wrow[s * WL + ol0:][:VEC]
                        for t in range(TW):
                            acc[t] += xin[t * swc + s] * wk
            return
        SS = self.FR or S
        for s in range(SS):
            for t in range(TW):
                col = (q0 + t) * sw - pw + s * dw
                if not hv or q0 + t >= qmax or col < 0 or col >= rowlen:
                    continue
                src = row_base + col * col_stride
                if self.GROUPED:
                    for ic0 in range(0, Cig, VEC):
                        xv = row_mem.load(src + ic0, VEC)
                        for v in range(VEC):
                            acc[t] += xv[v] * wrow[(s * Cig + ic0 + v) * WL + ol0:][:KPT]
                else:
                    acc[t] += row_mem.load(src, VEC) * wrow[s * WL + ol0:][:VEC]

    def corr_registers(self, c, inp: Memory, ws, out: Output, cub, by):
        U, TW = self.UNIT, self.TILE_W
        NU = c["Co"] // U
        ppb = self.BLOCK // cub
        WL = cub * U
        QT = cdiv(c["Wo"], TW)
        PT = c["N"] * c["Ho"] * QT
        gx = self.plan.grid_x
        RR = self.FR or c["R"]
        tapstride = (self.FR or c["S"]) * c["Cig"] * WL
        swc = self.swc(c)
        for bx in range(min(gx, cdiv(PT, ppb))):
            for tid in range(self.BLOCK):
                cu_l, pl = tid % cub, tid // cub
                cu = by * cub + cu_l
                if pl >= ppb or cu >= NU:
                    continue
                ol0, oc0 = cu_l * U, cu * U
                in_c0 = (oc0 // c["Cog"]) * c["Cig"] if self.GROUPED else oc0
                pt = bx * ppb + pl
                while pt < PT:
                    qt, rest = pt % QT, pt // QT
                    oh, n = rest % c["Ho"], rest // c["Ho"]
                    q0 = qt * TW
                    acc = np.zeros((TW, U))
                    for r in range(RR):
                        h = oh * c["sh"] - c["ph"] + r * c["dh"]
                        hv = 0 <= h < c["Hi"]
                        base = (n * c["Hi"] + (h if hv else 0)) * c["Wi"] * c["Ci"] + in_c0
                        self.corr_row(acc, inp, base, hv, c["Wi"], c["Ci"], ws[r * tapstride:],
                                      WL, ol0, c["Cig"], c["S"], c["sw"], c["pw"], c["dw"], q0,
                                      c["Wo"], swc)
                    pix0 = (n * c["Ho"] + oh) * c["Wo"] + q0
                    for t in range(TW):
                        if t < c["Wo"] - q0:
                            out.store((pix0 + t) * c["Co"] + oc0, acc[t])
                    pt += gx * ppb

    def corr_shared(self, c, inp: Memory, ws, out: Output, cub, by):
        TH, VEC, TW = self.SMEM, self.VEC, self.TILE_W
        NU = c["Co"] // VEC
        twb = (self.BLOCK // cub) // TH
        WL = cub * VEC
        ow_tile = twb * TW
        ih_n = (TH - 1) * c["sh"] + (c["R"] - 1) * c["dh"] + 1
        iw_n = (ow_tile - 1) * c["sw"] + (c["S"] - 1) * c["dw"] + 1
        tile_bytes = ih_n * iw_n * cub * VEC * self.eb
        taps_bytes = (c["R"] * c["S"] * cub * VEC * 4 + 15) // 16 * 16
        assert taps_bytes + tile_bytes <= self.plan.shared_bytes, "shared memory overrun"
        BH, BW = cdiv(c["Ho"], TH), cdiv(c["Wo"], ow_tile)
        BT = c["N"] * BH * BW
        RR = self.FR or c["R"]
        tapstride = (self.FR or c["S"]) * WL
        rowlen = iw_n * cub * VEC
        vecs = ih_n * iw_n * cub
        cbase = by * cub
        swc = self.swc(c)
        for bx in range(self.plan.grid_x):
            for bt in range(bx, BT, self.plan.grid_x):
                bw, rest = bt % BW, bt // BW
                bh, n = rest % BH, rest // BH
                oh0, ow0 = bh * TH, bw * ow_tile
                h0, w0 = oh0 * c["sh"] - c["ph"], ow0 * c["sw"] - c["pw"]
                tile = np.zeros(vecs * VEC)
                for i in range(vecs):
                    u, pix = i % cub, i // cub
                    iw, ih = pix % iw_n, pix // iw_n
                    h, wc = h0 + ih, w0 + iw
                    ok = 0 <= h < c["Hi"] and 0 <= wc < c["Wi"] and cbase + u < NU
                    if ok:
                        src = ((n * c["Hi"] + h) * c["Wi"] + wc) * c["Ci"] + (cbase + u) * VEC
                        tile[i * VEC:(i + 1) * VEC] = inp.load(src, VEC)
                tmem = Memory("tile", tile)
                for tid in range(self.BLOCK):
                    cu_l, rest_l = tid % cub, tid // cub
                    row_l, ct = rest_l % TH, rest_l // TH
                    cu = by * cub + cu_l
                    oh, q0l = oh0 + row_l, ct * TW
                    q0 = ow0 + q0l
                    if ct >= twb or cu >= NU or oh >= c["Ho"] or q0 >= c["Wo"]:
                        continue
                    ol0, oc0 = cu_l * VEC, cu * VEC
                    acc = np.zeros((TW, VEC))
                    for r in range(RR):
                        base = (row_l * c["sh"] + r * c["dh"]) * rowlen + ol0
                        self.corr_row(acc, tmem, base, True, iw_n, WL, ws[r * tapstride:], WL,
                                      ol0, 1, c["S"], c["sw"], 0, c["dw"], q0l, c["Wo"] - ow0,
                                      swc)
                    pix0 = (n * c["Ho"] + oh) * c["Wo"] + q0
                    for t in range(TW):
                        if t < c["Wo"] - q0:
                            out.store((pix0 + t) * c["Co"] + oc0, acc[t])

    def bwd_data_strided(self, dy: Memory, ws, out: Output, cub, by):
        p, U, TW, VEC, KPT = self.p, self.UNIT, self.TILE_W, self.VEC, self.KPT
        NU = p.C // U
        ppb, WL = self.BLOCK // cub, cub * U
        sw, sh = p.stride_w, p.stride_h
        WP = cdiv(p.W, sw)
        JT = cdiv(WP, TW)
        PT = p.N * p.H * sw * JT
        RS = p.R * p.S
        gx = self.plan.grid_x
        for bx in range(min(gx, cdiv(PT, ppb))):
            for tid in range(self.BLOCK):
                cu_l, pl = tid % cub, tid // cub
                cu = by * cub + cu_l
                if pl >= ppb or cu >= NU:
                    continue
                ol0, cc0 = cu_l * U, cu * U
                g = cc0 // p.c_per_group
                dy_c0 = g * p.k_per_group if self.GROUPED else cc0
                pt = bx * ppb + pl
                while pt < PT:
                    jt, rest = pt % JT, pt // JT
                    phase, rest = rest % sw, rest // sw
                    h, n = rest % p.H, rest // p.H
                    j0 = jt * TW
                    wc0 = j0 * sw + phase
                    if wc0 < p.W:
                        cols = min(TW, cdiv(p.W - phase, sw) - j0)
                        acc = np.zeros((TW, U))
                        for r in range(self.FR or p.R):
                            ph_ = h + p.pad_h - r * p.dil_h
                            if ph_ < 0 or ph_ % sh:
                                continue
                            oh = ph_ // sh
                            if oh >= p.P:
                                continue
                            row = (n * p.P + oh) * p.Q * p.K + dy_c0
                            for s in range(self.FR or p.S):
                                pw_ = phase + p.pad_w - s * p.dil_w
                                if c_rem(pw_, sw):
                                    continue
                                off = c_div(pw_, sw)
                                wtap = ((RS - 1) - (r * p.S + s)) * p.k_per_group * WL + ol0
                                for t in range(TW):
                                    q = j0 + t + off
                                    if t >= cols or q < 0 or q >= p.Q:
                                        continue
                                    src = row + q * p.K
                                    if self.GROUPED:
                                        for k0 in range(0, p.k_per_group, VEC):
                                            dv = dy.load(src + k0, VEC)
                                            for v in range(VEC):
                                                acc[t] += dv[v] * ws[wtap + (k0 + v) * WL:][:KPT]
                                    else:
                                        acc[t] += dy.load(src, VEC) * ws[wtap:wtap + VEC]
                        pix0 = (n * p.H + h) * p.W + wc0
                        for t in range(TW):
                            if t < cols:
                                out.store((pix0 + t * sw) * p.C + cc0, acc[t])
                    pt += gx * ppb

    def bwd_weight(self, x: Memory, dy: Memory, out: Output):
        p, VEC, KPT, TW, FR = self.p, self.VEC, self.KPT, self.TILE_W, self.FR
        plan, cub, BLOCK = self.plan, self.plan.cub, self.BLOCK
        CCH = p.c_per_group // VEC if self.GROUPED else 1
        NU = (p.K // KPT) * CCH if self.GROUPED else p.K // VEC
        DYV = KPT if self.GROUPED else VEC
        EPT = KPT * VEC if self.GROUPED else VEC
        TROWS, TCOLS = ((self.RB or FR), FR) if FR else (1, 1)
        assert BLOCK * EPT * 4 <= plan.shared_bytes
        ppb = BLOCK // cub
        total, RS = plan.total, p.R * p.S
        ws = Output("workspace", plan.splits * total)
        QT = cdiv(p.Q, TW)
        PT = p.N * p.P * QT
        swc = 1 if FR and p.dil_w == 1 and p.stride_w == 1 else 0
        for bz in range(plan.grid_z):
            for by in range(plan.slices):
                for bx in range(plan.grid_x):
                    if FR:
                        r0, s0 = bz * TROWS, 0
                    else:
                        r0, s0 = divmod(bz, p.S)
                    red = np.zeros((BLOCK, TROWS, TCOLS, EPT))
                    for tid in range(BLOCK):
                        cu_l, pl = tid % cub, tid // cub
                        cu = by * cub + cu_l
                        if not (pl < ppb and cu < NU):
                            continue
                        if self.GROUPED:
                            kc, cch = divmod(cu, CCH)
                            kk0 = kc * KPT
                            c_in0 = (kk0 // p.k_per_group) * p.c_per_group + cch * VEC
                        else:
                            kk0 = c_in0 = cu * VEC
                        acc = red[tid]
                        pt = bx * ppb + pl
                        while pt < PT:
                            qt, rest = pt % QT, pt // QT
                            oh, n = rest % p.P, rest // p.P
                            q0 = qt * TW
                            dv = np.zeros((TW, DYV))
                            dyp = ((n * p.P + oh) * p.Q + q0) * p.K + kk0
                            for t in range(TW):
                                if q0 + t < p.Q:
                                    dv[t] = dy.load(dyp + t * p.K, DYV)
                            for a in range(TROWS):
                                r = r0 + a
                                h = oh * p.stride_h - p.pad_h + r * p.dil_h
                                hv = r < p.R and 0 <= h < p.H
                                row = (n * p.H + (h if hv else 0)) * p.W * p.C + c_in0
                                if swc:
                                    win = (TW - 1) * swc + FR
                                    col0 = q0 * swc - p.pad_w
                                    xin = np.zeros((win, VEC))
                                    for j in range(win):
                                        col = col0 + j
                                        if hv and 0 <= col < p.W:
                                            xin[j] = x.load(row + col * p.C, VEC)
                                    for s in range(TCOLS):
                                        for t in range(TW):
                                            xs = xin[t * swc + s]
                                            acc[a, s] += (np.outer(dv[t], xs).ravel()
                                                          if self.GROUPED else dv[t] * xs)
                                else:
                                    for b in range(TCOLS):
                                        s = s0 + b
                                        for t in range(TW):
                                            col = (q0 + t) * p.stride_w - p.pad_w + s * p.dil_w
                                            if not hv or q0 + t >= p.Q or col < 0 or col >= p.W:
                                                continue
                                            xv = x.load(row + col * p.C, VEC)
                                            acc[a, b] += (np.outer(dv[t], xv).ravel()
                                                          if self.GROUPED else dv[t] * xv)
                            pt += plan.grid_x * ppb
                    for a in range(TROWS):
                        for b in range(TCOLS):
                            r, s = r0 + a, s0 + b
                            if r >= p.R:
                                break
                            for i in range(cub * EPT):
                                ul, e = divmod(i, EPT)
                                u = by * cub + ul
                                if u >= NU:
                                    continue
                                total_sum = sum(red[l * cub + ul, a, b, e] for l in range(ppb))
                                if self.GROUPED:
                                    kc, cch = divmod(u, CCH)
                                    k, v = divmod(e, VEC)
                                    idx = ((kc * KPT + k) * RS + r * p.S + s) * p.c_per_group \
                                        + cch * VEC + v
                                else:
                                    idx = (u * VEC + e) * RS + r * p.S + s
                                ws.store(bx * total + idx, [total_sum])
        assert (ws.writes == 1).all(), "workspace entries not written exactly once"
        out.store(0, ws.flat.reshape(plan.splits, total).sum(axis=0))

    def run(self, x, w, dy):
        p, plan = self.p, self.plan
        if self.op == "conv2d_bwd_weight":
            out = Output("dw", p.K * p.R * p.S * p.c_per_group)
            self.bwd_weight(Memory("x", x), Memory("dy", dy), out)
            return out
        reversed_ = self.op == "conv2d_bwd_data"
        out = Output("dx" if reversed_ else "y", (x if reversed_ else dy).size)
        inp = Memory("dy" if reversed_ else "x", dy if reversed_ else x)
        wm = Memory("w", w, vec_align=False)
        cig = p.k_per_group if reversed_ else p.c_per_group
        assert p.R * p.S * cig * plan.cub * self.UNIT * 4 <= plan.shared_bytes
        for by in range(plan.slices):
            ws = self.stage_taps(wm, by, plan.cub, reversed_)
            if reversed_ and (p.stride_h, p.stride_w) != (1, 1):
                self.bwd_data_strided(inp, ws, out, plan.cub, by)
            elif self.SMEM:
                self.corr_shared(self.corr(reversed_), inp, ws, out, plan.cub, by)
            else:
                self.corr_registers(self.corr(reversed_), inp, ws, out, plan.cub, by)
        return out


# ---- shapes --------------------------------------------------------------------------------
SHAPES = [  # depthwise, then grouped; strides, dilation, padding, odd sizes, N=1, H=W=1
    dict(N=2, C=16, K=16, G=16, H=5, W=7, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=8, K=8, G=8, H=7, W=9, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=8, K=8, G=8, H=7, W=6, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=1),
    dict(N=1, C=8, K=8, G=8, H=1, W=1, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=8, K=8, G=8, H=7, W=7, R=5, S=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2),
    dict(N=1, C=16, K=16, G=16, H=6, W=9, R=7, S=7, pad_h=3, pad_w=3),
    dict(N=1, C=8, K=8, G=8, H=7, W=7, R=3, S=5, stride_h=3, stride_w=2, dil_h=2, pad_w=2),
    dict(N=1, C=8, K=8, G=8, H=4, W=5, R=3, S=3, pad_h=3, pad_w=3),
    dict(N=2, C=8, K=8, G=2, H=5, W=6, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=1, C=16, K=32, G=2, H=5, W=5, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=1, C=32, K=16, G=2, H=6, W=5, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=1, C=6, K=6, G=2, H=4, W=5, R=5, S=5, pad_h=2, pad_w=2),
]

OPS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")


def _case(shape, op, seed=0):
    p = ConvProblem.from_fields(op, "bf16", shape)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (p.N, p.H, p.W, p.C))
    w = rng.uniform(-1, 1, (p.K, p.R, p.S, p.c_per_group))
    dy = rng.uniform(-1, 1, (p.N, p.P, p.Q, p.K))
    return p, x, w, dy


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ConvProblem.from_fields(
    "conv2d_fwd", "bf16", s).label().replace(" ", "_"))
def test_emulated_instances_match_reference(shape, op):
    p, x, w, dy = _case(shape, op)
    ref = reference(p, x, w, dy).ravel()
    served = 0
    for inst in FAMILY.instances(op, "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        served += 1
        out = Emulator(inst, p).run(x, w, dy)
        assert (out.writes == 1).all(), f"{inst.name}: outputs written {set(out.writes)} times"
        np.testing.assert_allclose(out.flat, ref, rtol=1e-10, atol=1e-10, err_msg=inst.name)
    assert served, f"no instance serves {p.label()}"


def test_reference_matches_direct_sum():
    """The einsum reference against the naive kernel's loops on one strided, dilated shape."""
    shape = dict(N=1, C=4, K=6, G=2, H=5, W=6, R=3, S=2, stride_h=2, stride_w=1, pad_h=1,
                 pad_w=1, dil_h=1, dil_w=2)
    for op in OPS:
        p, x, w, dy = _case(shape, op, seed=3)
        ref = reference(p, x, w, dy)
        cg, kg = p.c_per_group, p.k_per_group
        out = np.zeros_like(ref)
        for n in range(p.N):
            for oh in range(p.P):
                for q in range(p.Q):
                    for kk in range(p.K):
                        g = kk // kg
                        for r in range(p.R):
                            h = oh * p.stride_h - p.pad_h + r * p.dil_h
                            for s in range(p.S):
                                wc = q * p.stride_w - p.pad_w + s * p.dil_w
                                if not (0 <= h < p.H and 0 <= wc < p.W):
                                    continue
                                for c in range(cg):
                                    xv, wv = x[n, h, wc, g * cg + c], w[kk, r, s, c]
                                    if op == "conv2d_fwd":
                                        out[n, oh, q, kk] += xv * wv
                                    elif op == "conv2d_bwd_data":
                                        out[n, h, wc, g * cg + c] += dy[n, oh, q, kk] * wv
                                    else:
                                        out[kk, r, s, c] += dy[n, oh, q, kk] * xv
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_emulator_catches_a_wrong_layout():
    """The emulation is not vacuous: a descriptor whose plan lies about the units fails."""
    p, x, w, dy = _case(SHAPES[0], "conv2d_fwd")
    inst = next(i for i in FAMILY.instances("conv2d_fwd", "bf16") if not FAMILY.applicable(i, p))
    emu = Emulator(inst, p)
    emu.VEC = emu.UNIT = emu.VEC * 2 if emu.VEC < 8 else emu.VEC // 2
    with pytest.raises(AssertionError):
        out = emu.run(x, w, dy)
        np.testing.assert_allclose(out.flat, reference(p, x, w, dy).ravel())


__all__ = ["DirectConv", "Emulator", "reference"]


def _choose_cub_loop(family: DirectConv, instance, p: ConvProblem) -> int | None:
    """The channel-units choice written as a plain loop over cub (the specification)."""
    cfg = instance.settings
    block, units = cfg["block"], family._units(instance, p)
    unit = cfg["kpt"] if cfg["grouped"] else cfg["vec"]
    run_unit = cfg["vec"] if instance.operator == "conv2d_bwd_weight" else unit
    lanes = cfg.get("smem") or 1
    best, best_score = None, -1.0
    for cub in range(1, min(units, block // lanes) + 1):
        if family._shared_bytes(instance, p, cub) > 48 * 1024:
            continue
        used = (block // cub) // lanes * lanes * cub
        score = (used / block) * (units / (-(-units // cub) * cub))
        if cub < units:
            score *= min(1.0, cub * run_unit * (4 if p.dtype == "fp32" else 2) / 128)
        if cfg.get("smem"):
            shape = family._corr_shape(instance.operator, p)
            ow = min((block // cub) // lanes * cfg["tile_w"], shape["Wo"])
            ih = (lanes - 1) * shape["sh"] + (p.R - 1) * p.dil_h + 1
            iw = (ow - 1) * shape["sw"] + (p.S - 1) * p.dil_w + 1
            score /= (ih * iw) / (lanes * ow)
        if score >= best_score - 1e-9:
            best, best_score = cub, max(score, best_score)
    return best


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
def test_vectorised_channel_units_choice_equals_the_loop(op):
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(60):
        g = int(rng.choice([1, 2, 8, 32]))
        cg, kg = (1, 1) if rng.random() < 0.5 else (int(rng.choice([2, 4, 8, 16])),) * 2
        r = int(rng.choice([1, 3, 5, 7]))
        hw = int(rng.choice([7, 14, 28, 56, 112]))
        c = g * cg * (int(rng.choice([8, 24, 120])) if cg == 1 else 1)
        groups = c // cg
        p = ConvProblem(op=op, dtype=str(rng.choice(["bf16", "fp16", "fp32"])), N=8, C=c,
                        K=groups * kg, G=groups, H=hw, W=hw, R=r, S=r, pad_h=r // 2,
                        pad_w=r // 2, stride_h=int(rng.choice([1, 2])),
                        stride_w=1)
        for instance in FAMILY.instances(op, p.dtype):
            if instance.settings["grouped"] != (cg > 1):
                continue
            assert FAMILY._choose_cub(instance, p) == _choose_cub_loop(FAMILY, instance, p), (
                instance.name, p.label())
            checked += 1
    assert checked > 500


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
def test_shared_memory_fit_equals_a_channel_units_choice(op):
    """applicable's fit check (one unit first) says yes exactly where _choose_cub finds a
    count, on shapes up to filters and dilations that leave no count at all."""
    rng = np.random.default_rng(9)
    outcomes, staged_over = set(), 0  # staged_over: staged tiles where one unit is over
    for _ in range(150):
        g = int(rng.choice([1, 2, 8, 32]))
        cg, kg = (1, 1) if rng.random() < 0.5 else (int(rng.choice([2, 4, 8, 16])),) * 2
        r, dil = int(rng.choice([1, 3, 5, 7, 11])), int(rng.choice([1, 2, 6]))
        hw = int(rng.choice([14, 56, 112]))
        c = g * cg * (int(rng.choice([8, 24, 120])) if cg == 1 else 1)
        groups = c // cg
        try:
            p = ConvProblem(op=op, dtype=str(rng.choice(["bf16", "fp32"])), N=4, C=c,
                            K=groups * kg, G=groups, H=hw, W=hw, R=r, S=r, dil_h=dil,
                            dil_w=dil, pad_h=r // 2 * dil, pad_w=r // 2 * dil,
                            stride_h=int(rng.choice([1, 2])), stride_w=1)
        except ValueError:
            continue
        for instance in FAMILY.instances(op, p.dtype):
            fits = FAMILY._fits(instance, p)
            assert fits == (FAMILY._choose_cub(instance, p) is not None), (
                instance.name, p.label())
            outcomes.add(fits)
            staged_over += bool(instance.settings.get("smem")) and (
                FAMILY._shared_bytes(instance, p, 1) > 48 * 1024)
    assert outcomes == {True, False}
    assert staged_over > 0 or op == "conv2d_bwd_weight"  # no staged tiles there
