"""Group-normalization in NumPy float64: the forward (to make consistent inputs and to check the
backward by finite differences) and the backward the farm's groupnorm_bwd operator computes.

Tensors are N x C x H x W in the layout's axis order: "nhwc" arrays have shape (N, H, W, C),
"nchw" arrays (N, C, H, W). mean and rstd are (N, G) (or flat N * G, index n * G + g).
"""

from __future__ import annotations

import numpy as np

LAYOUTS = ("nhwc", "nchw")


def _grouped(t: np.ndarray, G: int, layout: str) -> np.ndarray:
    """t as float64 (N, G, C/G, HW)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 4:
        raise ValueError(f"expected a 4-d tensor, got shape {t.shape}")
    if layout == "nhwc":
        t = t.transpose(0, 3, 1, 2)
    N, C, H, W = t.shape
    if C % G:
        raise ValueError(f"C={C} is not a multiple of G={G}")
    return t.reshape(N, G, C // G, H * W)


def _ungrouped(t: np.ndarray, shape: tuple[int, ...], layout: str) -> np.ndarray:
    """Inverse of _grouped: (N, G, C/G, HW) back to the layout's shape."""
    if layout == "nhwc":
        N, H, W, C = shape
        return t.reshape(N, C, H, W).transpose(0, 2, 3, 1).copy()
    return t.reshape(shape).copy()


def groupnorm_fwd_stats(x: np.ndarray, G: int, eps: float = 1e-5,
                        layout: str = "nhwc") -> tuple[np.ndarray, np.ndarray]:
    """(mean, rstd), each (N, G) float64: rstd = 1 / sqrt(biased variance + eps)."""
    xg = _grouped(x, G, layout)
    mean = xg.mean(axis=(2, 3))
    var = ((xg - mean[:, :, None, None]) ** 2).mean(axis=(2, 3))
    return mean, 1.0 / np.sqrt(var + eps)


def groupnorm_fwd(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, G: int,
                  eps: float = 1e-5, layout: str = "nhwc") -> np.ndarray:
    """y = (x - mean) * rstd * gamma[c] + beta[c], float64, in x's layout."""
    mean, rstd = groupnorm_fwd_stats(x, G, eps, layout)
    xg = _grouped(x, G, layout)
    Cg = xg.shape[2]
    gam = np.asarray(gamma, np.float64).reshape(1, G, Cg, 1)
    bet = np.asarray(beta, np.float64).reshape(1, G, Cg, 1)
    y = (xg - mean[:, :, None, None]) * rstd[:, :, None, None] * gam + bet
    return _ungrouped(y, np.shape(x), layout)


def groupnorm_bwd(x: np.ndarray, dy: np.ndarray, gamma: np.ndarray, mean: np.ndarray,
                  rstd: np.ndarray, G: int,
                  layout: str = "nhwc") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dgamma, dbeta) in float64: dx in x's layout, dgamma and dbeta of length C.

    With ds[n,c] = sum_hw dy * x, db[n,c] = sum_hw dy, and per (n, g)
    sum1 = sum_{c in g} ds * gamma, sum2 = sum_{c in g} db * gamma, M = C/G * H * W:
      c1 = (sum2 * mean - sum1) * rstd^3 / M,  c2 = -c1 * mean - sum2 * rstd / M,
      dx = dy * gamma * rstd + x * c1 + c2,
      dgamma[c] = sum_n (ds - mean * db) * rstd,  dbeta[c] = sum_n db.
    mean and rstd are used as given (the saved statistics), not recomputed from x.
    """
    if np.shape(x) != np.shape(dy):
        raise ValueError(f"x {np.shape(x)} and dy {np.shape(dy)} differ")
    xg, dyg = _grouped(x, G, layout), _grouped(dy, G, layout)
    N, _, Cg, HW = xg.shape
    gam = np.asarray(gamma, np.float64).reshape(G, Cg)
    m = np.asarray(mean, np.float64).reshape(N, G)
    r = np.asarray(rstd, np.float64).reshape(N, G)
    ds = (dyg * xg).sum(axis=3)          # (N, G, Cg)
    db = dyg.sum(axis=3)
    sum1 = (ds * gam).sum(axis=2)        # (N, G)
    sum2 = (db * gam).sum(axis=2)
    count = Cg * HW
    c1 = (sum2 * m - sum1) * r**3 / count
    c2 = -c1 * m - sum2 * r / count
    dxg = (dyg * (gam[None, :, :, None] * r[:, :, None, None])
           + xg * c1[:, :, None, None] + c2[:, :, None, None])
    dgamma = ((ds - m[:, :, None] * db) * r[:, :, None]).sum(axis=0).reshape(-1)
    dbeta = db.sum(axis=0).reshape(-1)
    return _ungrouped(dxg, np.shape(x), layout), dgamma, dbeta


__all__ = ["groupnorm_bwd", "groupnorm_fwd", "groupnorm_fwd_stats"]
