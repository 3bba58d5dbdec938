"""The convolution families' rule keys (farm/select/rulekeys.py): what each family's
`applicable` reads of a shape, reduced to the values that decide it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from farm.select.rulekeys import RuleKey, at_least, settings_of
from kernels.conv.igemm import GRID_Z_LIMIT, IGemmConv, block_tiles
from kernels.conv.wgmma_im2col import BLOCK_K_TILES, MAX_SLICES, SLICE_COST
from kernels.conv.wgmma_split import MIN_SLICE_K_TILES
from kernels.family import SM_COUNT, Instance

GRID_LIMIT = 2**31 - 1  # a grid's x blocks (int32)


def _last_problem(make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`make`, remembering its value for the last problem asked (by identity: the problem is
    held, so its id is not reused): the keys of one shape share what they derive of it."""
    last: list = [(None, None)]

    def of(p: Any) -> Any:
        seen = last[0]
        if seen[0] is p:
            return seen[1]
        value = make(p)
        last[0] = (p, value)
        return value
    return of


@_last_problem
def _gemm_facts(p: Any) -> tuple:
    """What every GEMM family's key reads of a shape: (M, N, the rows of the largest grid-z
    slice (IGemmConv.gemm_rows), the shared head of the key, conv_wgmma's TMA modes)."""
    g = p.G
    m, n, _ = p.gemm
    rows = IGemmConv.gemm_rows(p)
    kg = p.K // g
    z = g * p.stride_h * p.stride_w if p.op == "conv2d_bwd_data" else g
    return (m, n, rows, (p.C // g % 8, kg % 8, z > GRID_Z_LIMIT),
            (rows, n) if rows * n > GRID_LIMIT else None,
            ((p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, g) == (1, 1, 1, 1, 0, 0, 1),
             kg % 64 == 0))


def _gemm_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_igemm and conv_wgmma (IGemmConv.applicable): the channels' residues against the
    loads' vectors, grid z, whether the tiles can overflow grid x, how many of the block sizes
    are idle on the GEMM (4x its M or N, above the smallest), and conv_wgmma's TMA modes."""
    assert family.gemm_rows is IGemmConv.gemm_rows  # the rows _gemm_facts reads
    small_m, small_n = family.smallest_tiles(operator)
    bms = [b for b in settings_of(instances, "block_m") if b > small_m]
    bns = [b for b in settings_of(instances, "block_n") if b > small_n]
    tma = "tma" in instances[0].settings if instances else False

    def key(p: Any) -> Hashable:
        m, n, _, head, big, modes = _gemm_facts(p)
        out = (*head, at_least(bms, 4 * m), at_least(bns, 4 * n), big)
        return out + modes if tma else out
    return key


def _wgmma_split_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_wgmma_split: conv_wgmma's key, and per tile and occupancy whether the resident
    blocks over the unsplit grid come to one slice (the rule that leaves the shape to
    conv_wgmma)."""
    from kernels.conv.wgmma import blocks_per_sm
    from kernels.conv.wgmma_split import reduction_k_tiles

    base = _gemm_key(family, instances, operator)
    classes = sorted({(i.settings["block_m"], i.settings["block_n"],
                       SM_COUNT * blocks_per_sm(i.settings)) for i in instances})

    def key(p: Any) -> Hashable:
        out = base(p)
        z = family.unsplit_z(p)
        if out[0] or out[1] or out[2] or GRID_Z_LIMIT // z <= 1 or reduction_k_tiles(p) < 4:
            return out + (None,)  # refused by conv_wgmma's rules, or one slice for every tile
        _, n, rows, _, _, _ = _gemm_facts(p)
        return out + (tuple([resident < 2 * z * block_tiles(rows, n, bm, bn)
                             for bm, bn, resident in classes]),)
    return key


def _wgmma_im2col_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_wgmma_im2col: whether the im2col copies serve the shape (none of its instances
    does where they do not), conv_wgmma's key of its whole-reduction instances and of its split
    ones, and for the split ones per tile and occupancy whether the slices that make the fewest
    waves come to one (the rule that leaves the shape to the unsplit ones). One key for both
    kinds: the copies' rule is read once a shape."""
    from kernels.conv.wgmma import blocks_per_sm
    from kernels.conv.wgmma_im2col import im2col_refusal
    from kernels.conv.wgmma_split import reduction_k_tiles

    whole = [i for i in instances if i.settings["split_k"]]
    split = [i for i in instances if not i.settings["split_k"]]
    classes = sorted({(i.settings["block_m"], i.settings["block_n"],
                       SM_COUNT * blocks_per_sm(i.settings)) for i in split})
    bases = [_gemm_key(family, chosen, operator) for chosen in (whole, split) if chosen]

    def key(p: Any) -> Hashable:
        if im2col_refusal(p) is not None:
            return None
        out = tuple([base(p) for base in bases])
        if not classes:
            return out
        z = family.unsplit_z(p)
        _, n, rows, _, _, _ = _gemm_facts(p)
        return out + one_slices(classes, z, rows, n, reduction_k_tiles(p), GRID_Z_LIMIT // z)
    return key


def one_slices(classes: Sequence[tuple[int, int, int]], z: int, rows: int, n: int,
               k_tiles: int, most: int) -> tuple[bool, ...]:
    """wgmma_im2col.one_slice of each (block_m, block_n, resident) class's blocks (z times
    its tiles of rows x n), its time expression the same, each split's k-tiles worked out
    once for every class."""
    top = max(1, min(MAX_SLICES, most, k_tiles // MIN_SLICE_K_TILES))
    if top == 1:
        return (True,) * len(classes)
    dearer = 1 + SLICE_COST  # _slice_time's factor of a split
    spans = [(s, -(-k_tiles // s) + BLOCK_K_TILES) for s in range(2, top + 1)]
    out = []
    for bm, bn, resident in classes:
        blocks = z * block_tiles(rows, n, bm, bn)
        unsplit = -(-blocks // resident) * (k_tiles + BLOCK_K_TILES)
        for s, span in spans:
            if -(-blocks * s // resident) * span * dearer < unsplit:
                out.append(False)
                break
        else:
            out.append(True)
    return tuple(out)


def _wgmma_red_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_wgmma_red: conv_wgmma's key, and per tile, split_k and occupancy whether the
    reduction comes to one slice (the rule that leaves the shape to conv_wgmma)."""
    return _slices_key(family, instances, operator, lambda p, slices: slices == 1)


def _wgmma_planes_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_wgmma_planes: conv_wgmma_red's rule, and whether the slices' planes pass the
    family's bound."""
    from kernels.conv.wgmma_planes import PLANES_BYTES, planes_bytes

    return _slices_key(family, instances, operator, lambda p, slices: (
        slices == 1, planes_bytes(p, slices) > PLANES_BYTES))


def _slices_key(family: Any, instances: Sequence[Instance], operator: str,
                rule: Callable[[Any, int], Hashable]) -> RuleKey:
    """conv_wgmma's key, and rule(shape, slices) for each class of instances whose slices are
    the same on every shape: a split_k asked for (its slices of block_k's k-tiles), or for
    split_k 0 (the resident blocks over the tiles) the tile and the resident blocks."""
    from kernels.conv.wgmma import blocks_per_sm

    assert type(family).tiles is IGemmConv.tiles  # the tiles below are its block_tiles
    asked: set[tuple[int, int]] = set()
    filling: set[tuple[int, int, int, int]] = set()
    for i in instances:
        c = i.settings
        if c["split_k"]:
            asked.add((c["block_k"], c["split_k"]))
        else:
            filling.add((c["block_k"], SM_COUNT * blocks_per_sm(c), c["block_m"], c["block_n"]))
    base = _gemm_key(family, instances, operator)
    # igemm.split_slices and wgmma.filling_splits, inlined: each class's requested slices
    # (split_k, or the resident blocks over the tiles of every group), by block_k
    depths = sorted({bk for bk, _ in asked} | {bk for bk, _, _, _ in filling})
    asked_at = [(depths.index(bk), split) for bk, split in sorted(asked)]
    tiles = sorted({(bm, bn) for _, _, bm, bn in filling})
    fills = [(depths.index(bk), resident, tiles.index((bm, bn)))
             for bk, resident, bm, bn in sorted(filling)]

    def key(p: Any) -> Hashable:
        _, n, rows, _, _, _ = _gemm_facts(p)
        groups, reduction = p.G, p.gemm[2]
        k_tiles = [-(-reduction // bk) for bk in depths]
        z_most = GRID_Z_LIMIT // groups
        counts = [-(-rows // bm) * -(-n // bn) * groups for bm, bn in tiles]
        wanted = asked_at + [(d, max(1, resident // counts[t])) for d, resident, t in fills]
        answers: dict[tuple[int, int], Hashable] = {}
        ruled: dict[int, Hashable] = {}
        for d, split in wanted:
            if (d, split) not in answers:
                k = k_tiles[d]
                per = -(-k // max(1, min(split, k, z_most)))
                slices = -(-k // per)
                if slices not in ruled:
                    ruled[slices] = rule(p, slices)
                answers[d, split] = ruled[slices]
        return base(p), tuple([answers[w] for w in wanted])
    return key


def _wgmma_blockdiag_key(family: Any, instances: Sequence[Instance], operator: str
                         ) -> RuleKey:
    """conv_wgmma_blockdiag: whether the shape has super-groups of whole groups, then
    conv_wgmma_im2col's key of the shape as padded super-groups, and for w's tiles copied
    straight (fused_filter) whether a super-group holds more than one group, whether w's rows
    of C/G channels are 16-byte runs and each tile width is whole boxes of K/G rows of 8-row
    multiples."""
    from kernels.conv.wgmma_blockdiag import groups_per_super, padded, padded_refusal

    widths = settings_of(instances, "block_n")

    def boxes(p: Any) -> Hashable:
        kg = p.k_per_group
        return (groups_per_super(p) > 1, p.c_per_group % 8 == 0,
                tuple(kg % 8 == 0 and bn % kg == 0 for bn in widths))

    base = _wgmma_im2col_key(family, instances, operator)
    return lambda p: None if padded_refusal(p) else (base(padded(p)), boxes(p))


def _wgmma_blockdiag_weight_key(family: Any, instances: Sequence[Instance],
                                operator: str) -> RuleKey:
    """conv_wgmma_blockdiag_weight: whether the shape has super-groups of whole groups, and
    then conv_wgmma_planes' key of the shape as super-groups."""
    from kernels.conv.wgmma_blockdiag_weight import blockdiag_refusal, supergroups

    base = _wgmma_planes_key(family, instances, operator)
    return lambda p: None if blockdiag_refusal(p) else base(supergroups(p))


def _direct_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_direct: depthwise or grouped and the widths' residues against vec and kpt, the
    filter (square or not), stride, and the most channels a thread's taps fit in shared memory
    for; the instances that stage their input tile ask the family (few)."""
    staged = [i for i in instances if i.settings.get("smem")]
    weight = operator == "conv2d_bwd_weight"

    def key(p: Any) -> Hashable:
        cg, kg = p.C // p.G, p.K // p.G
        square = p.R if p.R == p.S else -1
        if cg == 1 and kg == 1:
            out: tuple = (0, p.G % 8, square)
        elif cg > 16 or kg > 16:
            return None  # no instance serves such wide groups
        else:
            red, own = (kg, cg) if operator == "conv2d_bwd_data" else (cg, kg)
            out = (1, red % 8, own % 8, square)
        if weight:
            return out
        width = cg if operator == "conv2d_fwd" else kg
        out += (min(8, 12288 // (p.R * p.S * width)), (p.stride_h, p.stride_w) != (1, 1))
        if out[0] == 0 and staged:
            out += (tuple(family._fits(i, p) for i in staged if i.settings["fr"] == square),)
        return out
    return key


def _grouped_mma_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_grouped_mma (both): square groups of C a multiple of 8 only, the group width, and
    what the staged tile's extent reads (filter, stride, dilation; backward-data's padding)."""
    widest = max(settings_of(instances, "width"), default=0)
    padded = operator == "conv2d_bwd_data"

    def key(p: Any) -> Hashable:
        cg = p.C // p.G
        if cg != p.K // p.G or p.C % 8 or cg > widest:
            return None
        out = (cg, p.R, p.S, p.stride_h, p.stride_w, p.dil_h, p.dil_w)
        return out + (p.pad_h, p.pad_w) if padded else out
    return key


def _dw_tma_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_dw_tma (all three): depthwise with C a multiple of 8, the square filter and stride it is
    compiled for, no dilation, and backward-data's padding."""
    def key(p: Any) -> Hashable:
        if p.C != p.G or p.K != p.G or p.C % 8:
            return None
        return (p.R if p.R == p.S else -1, p.stride_h if p.stride_h == p.stride_w else -1,
                (p.dil_h, p.dil_w) == (1, 1),
                operator == "conv2d_bwd_data" and max(p.pad_h, p.pad_w) > p.R - 1)
    return key


def _stem_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_stem: the input channels a group it may be compiled for (and enough output
    channels), the channels against its 16-byte loads or stores, whether each configuration's
    filter values fit shared memory, the grid's y and z, and the patch stems."""
    from kernels.conv.stem import (GRID_LIMIT, NARROWEST_OUT, SHARED_LIMIT, WIDEST, filter_bytes,
                                   is_patch_stem)

    # one instance per kind whose filter and grid y differ: forward's kt, backward-data's
    # residue classes (patch 0) or patches
    kinds = list({(i.settings.get("kt"), bool(i.settings.get("patch"))): i
                  for i in instances}.values())

    def key(p: Any) -> Hashable:
        if p.c_per_group > WIDEST or p.k_per_group < NARROWEST_OUT:
            return None
        vec = family.vector_channels(p.dtype)
        return (p.c_per_group, p.K % vec == 0 and p.k_per_group % vec == 0,
                tuple(filter_bytes(i.settings, p) <= SHARED_LIMIT
                      and max(family.grid(i, p)[1:]) <= GRID_LIMIT for i in kinds),
                is_patch_stem(p, 2), is_patch_stem(p, 4))
    return key


def _stem_weight_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_stem_bwd_weight: the input channels a group (staged or copied) and K/G against the
    16-byte copies; then dw's columns (which block widths leave a warp idle or read dy more
    often than the widest), which channel tiles leave one of 16 idle, each tile's staged input
    (its shared memory), whether the grid can exceed its limit, and which tiles a larger one
    covers with no more padding."""
    from kernels.conv.stem_bwd_weight import CHANNEL_STEP, columns, outgrown, serves_groups_of
    from kernels.conv.stem_bwd_weight import GRID_LIMIT as Y_LIMIT

    mts = settings_of(instances, "mt")
    tiles = sorted({(i.settings["tp"], i.settings["tq"]) for i in instances})

    def key(p: Any) -> Hashable:
        cg, kg = p.c_per_group, p.k_per_group
        if not serves_groups_of(cg) or kg % CHANNEL_STEP:
            return None
        cols = columns(p)
        staged = tuple(rows * row for rows, row in
                       (family.staged({"tp": tp, "tq": tq}, p) for tp, tq in tiles))
        return (cg, cols, tuple(16 * (mt - 1) >= kg for mt in mts), staged, p.G > Y_LIMIT,
                kg if -(-kg // 16) * cols > Y_LIMIT else None,
                tuple(outgrown(tp, tq, p) for tp, tq in tiles))
    return key


def _pointwise_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_pointwise: whether the shape is a pointwise layer with channels of whole 16-byte
    copies, and the channels rounded to 16 (which decide each configuration's shared memory)."""
    from kernels.conv.pointwise import VECTOR, channels, is_pointwise, round16

    def key(p: Any) -> Hashable:
        if not is_pointwise(p) or p.C % VECTOR or p.K % VECTOR:
            return None
        return tuple(round16(v) for v in channels(p))
    return key


def _pointwise_cluster_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_pointwise_cluster: a pointwise layer with channels of whole 16-byte copies and few
    enough pixels."""
    from kernels.conv.pointwise import VECTOR, is_pointwise
    from kernels.conv.pointwise_cluster import MAX_PIXELS

    def key(p: Any) -> Hashable:
        return (is_pointwise(p) and not (p.C % VECTOR or p.K % VECTOR)
                and p.N * p.H * p.W <= MAX_PIXELS)
    return key


# family name -> its key's maker (family, the catalogue's instances of it, operator)
KEYS: dict[str, Callable[[Any, Sequence[Instance], str], RuleKey]] = {
    "conv_igemm": _gemm_key, "conv_wgmma": _gemm_key, "conv_wgmma_split": _wgmma_split_key,
    "conv_direct": _direct_key, "conv_grouped_mma": _grouped_mma_key,
    "conv_grouped_mma_bwd_weight": _grouped_mma_key, "conv_dw_tma": _dw_tma_key,
    "conv_dw_tma_bwd_weight": _dw_tma_key, "conv_dw_tc_bwd_weight": _dw_tma_key,
    "conv_stem": _stem_key, "conv_stem_bwd_weight": _stem_weight_key,
    "conv_wgmma_im2col": _wgmma_im2col_key, "conv_pointwise": _pointwise_key,
    "conv_pointwise_cluster": _pointwise_cluster_key, "conv_wgmma_cluster": _gemm_key,
    "conv_wgmma_red": _wgmma_red_key, "conv_wgmma_blockdiag": _wgmma_blockdiag_key,
    "conv_wgmma_planes": _wgmma_planes_key,
    "conv_wgmma_blockdiag_weight": _wgmma_blockdiag_weight_key,
    "conv_grouped_taps": _grouped_mma_key,
}

# families keyed together with another's: one key, computed once a shape, for the instances of
# both, where the other's key reads all that theirs would (conv_wgmma_planes' slices and planes
# hold conv_wgmma_red's slices)
SHARED = {"conv_wgmma_red": "conv_wgmma_planes"}
