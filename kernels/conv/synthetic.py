"""Synthetic convolution shapes that cover the space real networks draw from.

Filters 1x1 to 7x7, strides 1 and 2, dilation 1 and 2, groups from dense through grouped
(group widths 2 to 64) to depthwise, channels 8 to 2048, spatial sizes 1 to 112, batch 1 to 64, each
problem small enough to measure in milliseconds.
The same (count, seed) always gives the same shapes.
"""

from __future__ import annotations

import random

from kernels.operator import distinct_shapes

_CHANNELS = (8, 16, 24, 32, 40, 48, 64, 72, 96, 120, 128, 144, 160, 192, 240, 256, 320, 384,
             480, 512, 576, 672, 768, 960, 1024, 1280, 1536, 2048)
_SPATIAL = (1, 3, 7, 8, 13, 14, 16, 27, 28, 32, 55, 56, 64, 112)
_BATCH = (1, 2, 4, 8, 16, 32, 64)
_GROUPING = ("dense", "dense", "grouped", "grouped", "depthwise", "depthwise")
_GROUP_WIDTHS = (2, 4, 8, 16, 32, 64)
_MAX_ELEMENTS = 2**26  # per tensor: keeps one problem under a few hundred MB
_MAX_MACS = 2 * 10**11


def _groups(rng: random.Random, c: int) -> int:
    kind = rng.choice(_GROUPING)
    if kind == "dense":
        return 1
    if kind == "depthwise":
        return c
    widths = [w for w in _GROUP_WIDTHS if c % w == 0 and w < c]
    return c // rng.choice(widths) if widths else 1


def synthetic_shapes(count: int, seed: int = 0) -> list[dict[str, int]]:
    """`count` distinct valid shapes (fewer only if the space is exhausted first)."""
    return distinct_shapes(count, seed, _synthetic_draw)


def _synthetic_draw(rng: random.Random) -> dict[str, int] | None:
    """One shape of synthetic_shapes' space; None where it is not valid."""
    c = rng.choice(_CHANNELS)
    g = _groups(rng, c)
    k = c if g == c else rng.choice([x for x in _CHANNELS if x % g == 0] or [c])
    r = rng.choice((1, 1, 3, 3, 3, 5, 7))
    dil = 2 if r > 1 and rng.random() < 0.15 else 1
    stride = 2 if rng.random() < 0.25 else 1
    h = rng.choice(_SPATIAL)
    reach = dil * (r - 1) + 1
    if h + 2 * (reach // 2) < reach:
        return None
    n = rng.choice(_BATCH)
    macs = n * k * (c // g) * r * r * (h // stride) ** 2
    if n * h * h * max(c, k) > _MAX_ELEMENTS or macs > _MAX_MACS:
        return None
    return {"N": n, "C": c, "K": k, "G": g, "H": h, "W": h, "R": r, "S": r,
            "stride_h": stride, "stride_w": stride, "pad_h": reach // 2, "pad_w": reach // 2,
            "dil_h": dil, "dil_w": dil}


# The wider space of coverage_shapes: filters to 11x11, dilations to 3, stride 4, every group
# width from 1 to 64 channels, depthwise multipliers, maps that are not square.
_COVER_FILTERS = (1, 1, 2, 3, 3, 3, 4, 5, 5, 7, 7, 9, 11)
_COVER_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
_COVER_CHANNELS = (3, 4, *_CHANNELS)
_COVER_SPATIAL = (1, 2, 3, 5, 7, 8, 10, 13, 14, 17, 19, 24, 28, 32, 35, 38, 56, 64, 73, 112,
                  147, 192, 224)


def coverage_shapes(count: int, seed: int = 0) -> list[dict[str, int]]:
    """`count` distinct valid shapes drawn evenly over the classes a network may use, wider
    than synthetic_shapes: dense, grouped (every group width from 1 to 64 channels, the ones
    that divide C) and depthwise with channel multipliers 1, 2 and 4; filters 1x1 to 11x11
    (even sizes too, and now and then R != S), dilation 1 to 3, stride 1, 2 or 4; maps of 1 to
    224 pixels a side, not always square; batch 1 to 64. For training that covers the space
    and for active sampling's pool; the same (count, seed) always gives the same shapes."""
    return distinct_shapes(count, seed, _coverage_draw)


def _coverage_draw(rng: random.Random) -> dict[str, int] | None:
    """One shape of coverage_shapes' space; None where it is not valid."""
    c = rng.choice(_COVER_CHANNELS)
    kind = rng.choice(("dense", "grouped", "grouped", "depthwise"))
    if kind == "depthwise":
        g, k = c, c * rng.choice((1, 1, 2, 4))
    else:
        widths = [w for w in _COVER_WIDTHS if c % w == 0 and w < c]
        g = c // rng.choice(widths) if kind == "grouped" and widths else 1
        k = rng.choice([x for x in _COVER_CHANNELS if x % g == 0] or [c])
    r = rng.choice(_COVER_FILTERS)
    s = r if rng.random() < 0.85 else rng.choice(_COVER_FILTERS)
    dil = rng.choice((2, 3)) if max(r, s) > 1 and rng.random() < 0.15 else 1
    stride = rng.choice((1, 1, 1, 2, 2, 4))
    h = rng.choice(_COVER_SPATIAL)
    w = h if rng.random() < 0.8 else rng.choice(_COVER_SPATIAL)
    reach_h, reach_w = dil * (r - 1) + 1, dil * (s - 1) + 1
    pad_h, pad_w = reach_h // 2, reach_w // 2
    if h + 2 * pad_h < reach_h or w + 2 * pad_w < reach_w:
        return None
    p, q = (h + 2 * pad_h - reach_h) // stride + 1, (w + 2 * pad_w - reach_w) // stride + 1
    n = rng.choice(_BATCH)
    macs = n * k * (c // g) * r * s * p * q
    if n * h * w * c > _MAX_ELEMENTS or n * p * q * k > _MAX_ELEMENTS or macs > _MAX_MACS:
        return None
    return {"N": n, "C": c, "K": k, "G": g, "H": h, "W": w, "R": r, "S": s,
            "stride_h": stride, "stride_w": stride, "pad_h": pad_h, "pad_w": pad_w,
            "dil_h": dil, "dil_w": dil}
