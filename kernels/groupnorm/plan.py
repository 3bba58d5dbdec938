"""Group-normalization backward: the config spaces, applicability rules, workspace sizes and
launch geometry of the gn_onepass and gn_twopass families and of the GPU reference, as plain
functions over the shape record (kernels/groupnorm/problem.py); the families' descriptors
(families.py) and the operator (operator.py) wrap them.

Tensors by name (what Launch.args refer to): inputs x, dy (N x C x HW in the problem's layout,
element type), gamma (C, element type), mean, rstd (N * G, fp32); outputs dx (like x), dgamma,
dbeta (C, element type; fp32 for the reference); "workspace" (fp32 scratch, workspace_bytes).
The GnParams struct goes by value (a ctypes.Structure, as farm.launch.pack_args expects);
other scalars are int32.
"""

from __future__ import annotations

import ctypes
from typing import Any

from farm.problems import DTYPE_BYTES
from kernels.family import DTYPE_CODES, Launch
from kernels.groupnorm.problem import MAX_HW, GroupNormProblem
from kernels.operator import OUTPUT_EPS, tolerance_for  # noqa: F401 - OUTPUT_EPS re-exported

FAMILIES = ("gn_onepass", "gn_twopass")
SOURCES = {"gn_onepass": "groupnorm/onepass.cu", "gn_twopass": "groupnorm/twopass.cu"}
REFERENCE_SOURCE = "groupnorm/reference.cu"
LAYOUTS = {"nhwc": 0, "nchw": 1}

THREADS = (128, 256, 512)
SPLITS_HW = (1, 4, 16, 64)
MAX_GRID_YZ = 65535
MAX_GRID_X = 2**31 - 1
DX_GRID_CAP = 65535           # gn_twopass_dx: blocks per sample at most (grid-stride loop)
REFERENCE_SMALL_BLOCK = 64    # reference stats / dparams: one thread per (n, g) / channel
REFERENCE_BLOCK = 256         # reference dx: one thread per element
REFERENCE_DX_BLOCKS = 132 * 16
REFERENCE_STATS_BLOCK = 256   # forward statistics: one block per (n, g)
EPS = 1e-5                    # the forward's epsilon (PyTorch's GroupNorm default)


class GnParams(ctypes.Structure):
    """struct GnParams of gn_common.cuh, passed by value."""

    _fields_ = [(name, ctypes.c_int32) for name in
                ("N", "C", "H", "W", "G", "Cg", "HW", "layout")]


def gn_params(p: GroupNormProblem) -> GnParams:
    return GnParams(p.N, p.C, p.H, p.W, p.G, p.Cg, p.HW, LAYOUTS[p.layout])


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_floor(v: int) -> int:
    return 1 << (max(1, v).bit_length() - 1)


def vector_widths(dtype: str) -> tuple[int, ...]:
    """Elements per access: at most 16 bytes."""
    return tuple(v for v in (1, 2, 4, 8) if v * DTYPE_BYTES[dtype] <= 16)


# Config spaces ----------------------------------------------------------------------------------
def configs(family: str, dtype: str) -> list[dict[str, Any]]:
    """Every instance's configuration for one element type. Fields: layout (0 NHWC, 1 NCHW),
    threads, vec, and cpt (gn_onepass; channels per thread, NHWC) or split_hw (gn_twopass)."""
    out: list[dict[str, Any]] = []
    for layout in (0, 1):
        for threads in THREADS:
            for vec in vector_widths(dtype):
                if family == "gn_onepass":
                    for cpt in ((vec, 2 * vec) if layout == 0 else (1,)):
                        if threads * cpt <= 4096:  # row sums in shared memory: <= 32 KiB
                            out.append({"layout": layout, "threads": threads, "vec": vec,
                                        "cpt": cpt})
                elif family == "gn_twopass":
                    for split in SPLITS_HW:
                        out.append({"layout": layout, "threads": threads, "vec": vec,
                                    "split_hw": split})
                else:
                    raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    return out


def defines(family: str, dtype: str, cfg: dict[str, Any]) -> dict[str, int]:
    """Compile-time constants. split_hw is a launch-time choice (grid and an argument), so
    instances differing only in it share one code object."""
    out = {"FARM_DTYPE": DTYPE_CODES[dtype], "FARM_LAYOUT": cfg["layout"],
           "FARM_THREADS": cfg["threads"], "FARM_VEC": cfg["vec"]}
    if family == "gn_onepass":
        out["FARM_CPT"] = cfg["cpt"]
    return out


def reference_defines(dtype: str) -> dict[str, int]:
    return {"FARM_DTYPE": DTYPE_CODES[dtype], "FARM_REFERENCE": 1}


def instance_name(family: str, dtype: str, cfg: dict[str, Any]) -> str:
    layout = "nhwc" if cfg["layout"] == 0 else "nchw"
    rest = "_".join(f"{k}{v}" for k, v in cfg.items() if k != "layout")
    return f"{family.removeprefix('gn_')}_{dtype}_{layout}_{rest}"


# Applicability ----------------------------------------------------------------------------------
def _split_units(cfg: dict[str, Any], p: GroupNormProblem) -> int:
    """What gn_twopass splits into chunks: HW rows (NHWC) or HW / vec vectors (NCHW)."""
    return p.HW if cfg["layout"] == 0 else p.HW // cfg["vec"]


def applicable(family: str, cfg: dict[str, Any], p: GroupNormProblem,
               dtype: str | None = None) -> str | None:
    """Why the instance cannot serve `p`, or None. `dtype`: the instance's element type (when
    given, it must be the problem's)."""
    if dtype is not None and dtype != p.dtype:
        return f"instance is for {dtype}, problem is {p.dtype}"
    if LAYOUTS[p.layout] != cfg["layout"]:
        return f"instance is for {'nhwc' if cfg['layout'] == 0 else 'nchw'}, problem is {p.layout}"
    if p.HW > MAX_HW:
        return f"H*W={p.HW} above {MAX_HW}"
    vec = cfg["vec"]
    if cfg["vec"] * DTYPE_BYTES[p.dtype] > 16:
        return f"vec={vec} {p.dtype} elements exceed a 16-byte access"
    if family == "gn_onepass":
        if p.N * p.G >= 2**31:
            return f"N*G={p.N * p.G} blocks exceed the grid"
        if cfg["layout"] == 0 and p.Cg % vec:
            return f"C/G={p.Cg} is not a multiple of vec={vec} (vector loads along C)"
        if cfg["layout"] == 1 and p.HW % vec:
            return f"H*W={p.HW} is not a multiple of vec={vec} (vector loads along HW)"
        return None
    if family != "gn_twopass":
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    if p.N > MAX_GRID_YZ:
        return f"N={p.N} above {MAX_GRID_YZ} (a grid dimension)"
    if p.C * p.HW >= 2**31:
        return f"C*H*W={p.C * p.HW} per sample reaches 2^31 (32-bit indices)"
    if cfg["layout"] == 0 and p.C % vec:
        return f"C={p.C} is not a multiple of vec={vec} (vector loads along C)"
    if cfg["layout"] == 1 and p.HW % vec:
        return f"H*W={p.HW} is not a multiple of vec={vec} (vector loads along HW)"
    units = _split_units(cfg, p)
    if cfg["split_hw"] > units:
        what = "H*W" if cfg["layout"] == 0 else "H*W/vec"
        return (f"split_hw={cfg['split_hw']} exceeds {what}={units}: chunks would be empty "
                "(a smaller split serves this shape)")
    return None


# Workspace and launches ------------------------------------------------------------------------
def workspace_bytes(family: str, cfg: dict[str, Any], p: GroupNormProblem) -> int:
    """fp32 scratch: gn_onepass [ds][db] N x C each; gn_twopass [ds][db] split_hw x N x C each,
    then [a][b][k] N x C each. Never needs zeroing: the kernels write every entry they read."""
    plane = p.N * p.C * 4
    if family == "gn_onepass":
        return 2 * plane
    return (2 * cfg["split_hw"] + 3) * plane


def twopass_partial_geometry(cfg: dict[str, Any], p: GroupNormProblem) -> tuple[int, int]:
    """gn_twopass_partial: (grid.x, lanes). NHWC: the C / vec vectors of a row are cut into
    ceil(C / vec / 32) tiles of equal width (lanes <= 32 threads along C; THREADS / lanes rows
    at a time). NCHW: `lanes` threads per channel, the largest power of two <= the chunk length
    in vectors (at most THREADS); THREADS / lanes channels per block."""
    threads, vec, split = cfg["threads"], cfg["vec"], cfg["split_hw"]
    if cfg["layout"] == 0:
        cv = p.C // vec
        tiles = _cdiv(cv, 32)
        return tiles, _cdiv(cv, tiles)
    chunk = _cdiv(p.HW // vec, split)
    lanes = min(threads, _pow2_floor(chunk))
    return _cdiv(p.C, threads // lanes), lanes


def launches(family: str, cfg: dict[str, Any], p: GroupNormProblem) -> list[Launch]:
    """The launches computing dx, dgamma and dbeta, in order (one timed unit)."""
    params, t = gn_params(p), cfg["threads"]
    block = (t, 1, 1)
    if family == "gn_onepass":
        return [
            Launch("gn_onepass_main", (p.N * p.G, 1, 1), block,
                   ("x", "dy", "gamma", "mean", "rstd", "dx", "workspace", params)),
            Launch("gn_onepass_dparams", (_cdiv(p.C, 32), 1, 1), block,
                   ("workspace", "mean", "rstd", "dgamma", "dbeta", params)),
        ]
    split = cfg["split_hw"]
    gx, lanes = twopass_partial_geometry(cfg, p)
    finish_blocks = _cdiv(p.N * p.G, t // 32) + _cdiv(p.C, 32)
    dx_blocks = min(_cdiv(p.C * p.HW // cfg["vec"], t), DX_GRID_CAP)
    return [
        Launch("gn_twopass_partial", (gx, split, p.N), block,
               ("x", "dy", "workspace", params, lanes)),
        Launch("gn_twopass_finish", (finish_blocks, 1, 1), block,
               ("gamma", "mean", "rstd", "workspace", "dgamma", "dbeta", params, split)),
        Launch("gn_twopass_dx", (dx_blocks, p.N, 1), block,
               ("x", "dy", "workspace", "dx", params, split)),
    ]


def reference_workspace_bytes(p: GroupNormProblem) -> int:
    """The reference's scratch: {c1, c2} per (n, g), fp32."""
    return 2 * p.N * p.G * 4


def reference_launches(p: GroupNormProblem) -> list[Launch]:
    """The GPU reference (reference.cu, compiled with reference_defines): fp32 dx, dgamma,
    dbeta. Every entry is a grid-stride loop, so these grids are a choice, not a requirement."""
    params = gn_params(p)
    small = (REFERENCE_SMALL_BLOCK, 1, 1)
    return [
        Launch("groupnorm_bwd_ref_stats", (_cdiv(p.N * p.G, REFERENCE_SMALL_BLOCK), 1, 1), small,
               ("x", "dy", "gamma", "mean", "rstd", "workspace", params)),
        Launch("groupnorm_bwd_ref_dx",
               (min(_cdiv(p.elements, REFERENCE_BLOCK), REFERENCE_DX_BLOCKS), 1, 1),
               (REFERENCE_BLOCK, 1, 1),
               ("x", "dy", "gamma", "rstd", "workspace", "dx", params)),
        Launch("groupnorm_bwd_ref_dparams", (_cdiv(p.C, REFERENCE_SMALL_BLOCK), 1, 1), small,
               ("x", "dy", "mean", "rstd", "dgamma", "dbeta", params)),
    ]


def stats_launches(p: GroupNormProblem) -> list[Launch]:
    """The forward's statistics from x (reference.cu, groupnorm_fwd_stats): mean and rstd =
    1 / sqrt(biased variance + EPS) per (n, g), rounded to the problem's element type as a
    forward pass in that type saves them, held in fp32, so the backward's inputs are those of a
    real forward pass. A grid-stride loop over the groups, one block each."""
    return [Launch("groupnorm_fwd_stats", (min(p.N * p.G, MAX_GRID_X), 1, 1),
                   (REFERENCE_STATS_BLOCK, 1, 1), ("x", "mean", "rstd", gn_params(p), EPS))]


# Verification -----------------------------------------------------------------------------------
def reduction_lengths(p: GroupNormProblem) -> dict[str, int]:
    """How many products feed one element of each output: dx through c1, c2 (a group's M
    elements), dgamma and dbeta (N * HW)."""
    return {"dx": p.Cg * p.HW, "dgamma": p.N * p.HW, "dbeta": p.N * p.HW}


def tolerance(dtype: str, length: int) -> tuple[float, float]:
    """(relative L2, relative max) limits of kernels/operator.py's tolerance_for."""
    limit = tolerance_for(dtype, length)
    return limit.rel_l2, limit.rel_max


__all__ = ["FAMILIES", "GnParams", "GroupNormProblem", "applicable", "configs", "defines",
           "gn_params", "instance_name", "launches", "reduction_lengths", "reference_defines",
           "reference_launches", "reference_workspace_bytes", "stats_launches", "tolerance",
           "workspace_bytes"]
