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


# The space of stage_shapes: layers where networks put them. A network's maps halve from stage
# to stage while its channels grow, so narrow layers sit on large maps and wide ones on small
# maps; drawn independently (synthetic_shapes, coverage_shapes) the two rarely meet.
_STAGE_MAPS = (224, 112, 56, 28, 14, 7)  # a stage's maps; now and then one pixel more
_STAGE_WIDTHS = (8, 16, 24, 32, 48, 64)  # the channels at 112x112 (half that at 224)
_STAGE_LAYERS = ("pointwise", "pointwise", "pointwise", "depthwise", "depthwise", "grouped",
                 "dense")
_STAGE_RATIOS = (0.25, 0.5, 1, 1, 2, 4, 6)  # a layer's channels over its stage's width
_STAGE_WIDTHS_A_GROUP = (4, 8, 16, 32, 64)


def stage_shapes(count: int, seed: int = 0) -> list[dict[str, int]]:
    """`count` distinct valid shapes drawn as networks stack their layers: a stage of maps from
    224 to 7 pixels (one more now and then), whose channels are 8 to 64 at 112x112 and double
    each stage, and in it a 1x1 layer that expands, keeps or projects the channels (up to 6 times),
    a depthwise 3x3 to 7x7 (multiplier 1 or 2), a grouped 3x3 of 4 to 64 channels a group or a
    dense 3x3; stride 2 into a stage now and then; batch 1 to 64. The narrow layers on large
    maps and the wide ones on small maps that real networks have, over a continuum of widths
    rather than a list of networks; the same (count, seed) always gives the same shapes."""
    return distinct_shapes(count, seed, _stage_draw)


def _round8(x: float) -> int:
    return max(8, min(2048, int(round(x / 8)) * 8))


def _stage_draw(rng: random.Random) -> dict[str, int] | None:
    """One shape of stage_shapes' space; None where it is not valid."""
    stage = rng.randrange(len(_STAGE_MAPS))
    out = _STAGE_MAPS[stage] + (1 if rng.random() < 0.15 else 0)
    width = rng.choice(_STAGE_WIDTHS) * 2.0 ** (stage - 1) * rng.uniform(0.75, 1.5)
    c = _round8(width * rng.choice(_STAGE_RATIOS))
    kind = rng.choice(_STAGE_LAYERS)
    stride = 2 if out <= 112 and rng.random() < 0.2 else 1
    if kind == "pointwise":
        r, g, k = 1, 1, _round8(c * rng.choice((1 / 6, 0.25, 0.5, 1, 2, 4, 6)))
    elif kind == "depthwise":
        r, g = rng.choice((3, 3, 5, 7)), c
        k = c * rng.choice((1, 1, 1, 2))
    elif kind == "grouped":
        widths = [w for w in _STAGE_WIDTHS_A_GROUP if c % w == 0 and w < c]
        if not widths:
            return None
        r, g, k = 3, c // rng.choice(widths), c
    else:
        r, g, k = 3, 1, c * rng.choice((1, 1, 2))
    h = (out - 1) * stride + 1  # the input map under `out` outputs
    h = h + (1 if stride == 2 and rng.random() < 0.5 else 0)
    pad = r // 2
    n = rng.choice(_BATCH)
    p = (h + 2 * pad - r) // stride + 1
    if n * h * h * c > _MAX_ELEMENTS or n * p * p * k > _MAX_ELEMENTS \
            or n * k * (c // g) * r * r * p * p > _MAX_MACS:
        return None
    return {"N": n, "C": c, "K": k, "G": g, "H": h, "W": h, "R": r, "S": r,
            "stride_h": stride, "stride_w": stride, "pad_h": pad, "pad_w": pad,
            "dil_h": 1, "dil_w": 1}
