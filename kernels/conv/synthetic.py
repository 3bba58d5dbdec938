"""Synthetic convolution shapes that cover the space real networks draw from.

Filters 1x1 to 7x7, strides 1 and 2, dilation 1 and 2, groups from dense through grouped
(group widths 2 to 64) to depthwise, channels 8 to 2048, spatial sizes 1 to 112, batch 1 to 64, each
problem small enough to measure in milliseconds.
The same (count, seed) always gives the same shapes.
"""

from __future__ import annotations

import random

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
    rng = random.Random(seed)
    shapes: dict[tuple[int, ...], dict[str, int]] = {}
    attempts = 0
    while len(shapes) < count and attempts < 50 * count:
        attempts += 1
        c = rng.choice(_CHANNELS)
        g = _groups(rng, c)
        k = c if g == c else rng.choice([x for x in _CHANNELS if x % g == 0] or [c])
        r = rng.choice((1, 1, 3, 3, 3, 5, 7))
        dil = 2 if r > 1 and rng.random() < 0.15 else 1
        stride = 2 if rng.random() < 0.25 else 1
        h = rng.choice(_SPATIAL)
        reach = dil * (r - 1) + 1
        if h + 2 * (reach // 2) < reach:
            continue
        n = rng.choice(_BATCH)
        macs = n * k * (c // g) * r * r * (h // stride) ** 2
        if n * h * h * max(c, k) > _MAX_ELEMENTS or macs > _MAX_MACS:
            continue
        shape = {"N": n, "C": c, "K": k, "G": g, "H": h, "W": h, "R": r,
                 "S": r, "stride_h": stride, "stride_w": stride, "pad_h": reach // 2,
                 "pad_w": reach // 2, "dil_h": dil, "dil_w": dil}
        shapes.setdefault(tuple(shape.values()), shape)
    return list(shapes.values())
