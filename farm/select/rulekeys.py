"""The families' applicability rules, answered for a whole catalogue at once.

A family's rule key is what its `applicable` reads of a shape, reduced to the few values that
decide it: two shapes of the same key are served by the same instances of the family (in a
catalogue of that family's instances: the key may use their configurations). RuleMasks keeps
each family's answer per key, computed by the family's own rules on the first shape of that
key, so the mask of a new shape costs the keys and a lookup, and is exactly the rules' answer
where every family has a key. A family without one (KEYS below) is left to the rules: its
instances are kept in the mask where their compiled case (a necessary condition) allows, and
the caller checks them one at a time (`RuleMask.exact` is False while one of them is in).

tests/test_select_rulekeys.py checks every operator's families, on random and recorded
shapes, against their rules: a rule that comes to read more of a shape than its key fails it.
"""

from __future__ import annotations

import ctypes
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.family import SM_COUNT, Instance, KernelFamily
from kernels.registry import get_family

RuleKey = Callable[[Any], Hashable]
CACHE_LIMIT = 1 << 14  # masks kept per family and in all; past it they are computed afresh
GRID_LIMIT = 2**31 - 1  # a grid's x blocks (int32)


def _at_least(values: Sequence[int], limit: int) -> int:
    """How many of the sorted `values` are at least `limit`."""
    return len(values) - bisect_left(values, limit)


def _above(values: Sequence[int], limit: int) -> int:
    """How many of the sorted `values` are above `limit`."""
    return len(values) - bisect_right(values, limit)


def _settings(instances: Sequence[Instance], field: str) -> list[Any]:
    return sorted({i.settings[field] for i in instances})


# Convolutions ---------------------------------------------------------------------------------
def _gemm_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_igemm and conv_wgmma (IGemmConv.applicable): the channels' residues against the
    loads' vectors, grid z, whether the tiles can overflow grid x, how many of the block sizes
    are idle on the GEMM (4x its M or N, above the smallest), and conv_wgmma's TMA modes."""
    from kernels.conv.igemm import GRID_Z_LIMIT

    small_m, small_n = family.smallest_tiles(operator)
    bms = [b for b in _settings(instances, "block_m") if b > small_m]
    bns = [b for b in _settings(instances, "block_n") if b > small_n]
    tma = "tma" in instances[0].settings if instances else False
    rows_of = family.gemm_rows

    def key(p: Any) -> Hashable:
        m, n, _ = p.gemm
        rows = rows_of(p)
        z = p.G * p.stride_h * p.stride_w if p.op == "conv2d_bwd_data" else p.G
        out = (p.C // p.G % 8, p.K // p.G % 8, z > GRID_Z_LIMIT, _at_least(bms, 4 * m),
               _at_least(bns, 4 * n), (rows, n) if rows * n > GRID_LIMIT else None)
        if tma:
            out += ((p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.G)
                    == (1, 1, 1, 1, 0, 0, 1), p.K // p.G % 64 == 0)
        return out
    return key


def _wgmma_split_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_wgmma_split: conv_wgmma's key, and per tile and occupancy whether the resident
    blocks over the unsplit grid come to one slice (the rule that leaves the shape to
    conv_wgmma)."""
    from kernels.conv.igemm import GRID_Z_LIMIT
    from kernels.conv.wgmma import blocks_per_sm
    from kernels.conv.wgmma_split import reduction_k_tiles

    base = _gemm_key(family, instances, operator)
    classes = sorted({(i.settings["block_m"], i.settings["block_n"],
                       SM_COUNT * blocks_per_sm(i.settings)) for i in instances})
    rows_of = family.gemm_rows

    def key(p: Any) -> Hashable:
        out = base(p)
        z = family.unsplit_z(p)
        if out[0] or out[1] or out[2] or GRID_Z_LIMIT // z <= 1 or reduction_k_tiles(p) < 4:
            return out + (None,)  # refused by conv_wgmma's rules, or one slice for every tile
        rows, n = rows_of(p), p.gemm[1]
        return out + (tuple(resident < 2 * z * -(-rows // bm) * -(-n // bn)
                            for bm, bn, resident in classes),)
    return key


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
    widest = max(_settings(instances, "width"), default=0)
    padded = operator == "conv2d_bwd_data"

    def key(p: Any) -> Hashable:
        cg = p.C // p.G
        if cg != p.K // p.G or p.C % 8 or cg > widest:
            return None
        out = (cg, p.R, p.S, p.stride_h, p.stride_w, p.dil_h, p.dil_w)
        return out + (p.pad_h, p.pad_w) if padded else out
    return key


def _dw_tma_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """conv_dw_tma (both): depthwise with C a multiple of 8, the square filter and stride it is
    compiled for, no dilation, and backward-data's padding."""
    def key(p: Any) -> Hashable:
        if p.C != p.G or p.K != p.G or p.C % 8:
            return None
        return (p.R if p.R == p.S else -1, p.stride_h if p.stride_h == p.stride_w else -1,
                (p.dil_h, p.dil_w) == (1, 1),
                operator == "conv2d_bwd_data" and max(p.pad_h, p.pad_w) > p.R - 1)
    return key


# Group normalization --------------------------------------------------------------------------
def _groupnorm_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """gn_onepass and gn_twopass (kernels/groupnorm/plan.py): layout, the grid and index
    limits, the residues against the vectors, and how many of the splits of H*W (or of its
    vectors) would leave a chunk empty."""
    from kernels.groupnorm.plan import MAX_GRID_YZ
    from kernels.groupnorm.problem import MAX_HW

    splits = sorted({i.settings.get("split_hw", 1) for i in instances})

    def key(p: Any) -> Hashable:
        hw = p.HW
        return (p.layout, hw > MAX_HW, p.N * p.G >= 2**31, p.Cg % 8, hw % 8,
                p.N > MAX_GRID_YZ, p.C * hw >= 2**31, p.C % 8,
                _above(splits, hw), _above(splits, hw // 2), _above(splits, hw // 4),
                _above(splits, hw // 8))
    return key


# The depthwise-separable convolution ------------------------------------------------------------
# The counts the dwsep rules compare, and up to where: pixel or spatial tiles against the most a
# block walks (`tiles`) and channel tiles against k_blocks (at most 4), so a count's key is how
# many of the products size x 1..most lie below the shape's; chunks of 32 channels (a cluster
# split leaves no block empty from 50 on, and the pipelines' steps then exceed their stages).
PASSES_SEEN, CHUNKS_SEEN = 4, 99


def _largest(ok: Callable[[int], bool], top: int = 2**31) -> int:
    """The largest x in [0, top] with ok(x), for an `ok` that holds up to a point (-1 where
    it never does)."""
    if ok(top):
        return top
    low, high = -1, top  # ok(low) holds (or low is -1), ok(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if ok(middle) else (low, middle)
    return low


def _mc_limits(instances: Sequence[Instance], fits: Callable[[Instance, Any], bool]
               ) -> list[int]:
    """Per instance the largest M*C whose shared memory `fits` (sorted): how many lie below a
    shape's M*C tells which instances fit it."""
    from types import SimpleNamespace

    return sorted(_largest(lambda mc, i=i: fits(i, SimpleNamespace(MC=mc))) for i in instances)


def _products(sizes: Sequence[int], seen: int) -> list[int]:
    """size x 1..seen of each size, sorted: where a count of tiles of each size (its ceil
    division) passes 1, 2, ..., seen."""
    return sorted({t * j for t in sizes for j in range(1, seen + 1)})


def _chunk_sees(q: int, splits: Sequence[tuple[int, int, int]]) -> tuple:
    """What the rules see of q chunks of 32 channels for each chunk width, cluster split and
    most stages in `splits`: whether the split leaves a block without a chunk
    (DwsepTensorCore.empty_split: only for at most (split - 1)^2 chunks), and a block's chunks
    up to the stages of its pipeline (more steps than stages fill it)."""
    sees = []
    for kc, c, stages in splits:
        n = -(-q // (kc // 32))
        sees.append((c > 1 and (c - 1) * -(-n // c) >= n, min(-(-n // c), stages)))
    return tuple(sees)


def _chunk_classes(splits: Sequence[tuple[int, int, int]]) -> list[int]:
    """Per count of 32-channel chunks up to CHUNKS_SEEN, a class of what the rules see of it
    (_chunk_sees): counts of one class look alike to every split."""
    seen: dict[tuple, int] = {}
    return [seen.setdefault(_chunk_sees(q, splits), len(seen)) for q in range(CHUNKS_SEEN + 1)]


_LAST: tuple = (None, None)  # the problem the values below were computed for, and them


def _dwsep_values(p: Any) -> tuple:
    """What every dwsep key reads of a shape, computed once per problem: whether the
    cp.async copies serve it (multiplier 1, C a multiple of 8), N*P*Q, and whether a grid's
    limits (x blocks, y's 65535 channel tiles) may bind (then the whole shape is the key)."""
    global _LAST
    last = _LAST  # one read, one write: threads may share it
    if last[0] is p:
        return last[1]
    npq = p.N * p.P * p.Q
    values = (p.multiplier == 1 and p.C % 8 == 0, npq,
              npq * max(p.K, 1) >= 2**31 or p.K > 65535 * 16)
    _LAST = (p, values)
    return values


def _dwsep_key(family: Any, instances: Sequence[Instance], operator: str) -> RuleKey:
    """The dwsep families (kernels/dwsep/families.py, each family's rules): the copies, the
    filter case, pixel, spatial and channel tiles and chunks counted up to where the rules
    stop comparing them, and the M*C whose resident tiles fit shared memory."""
    from kernels.dwsep import families as dw

    configs = [i.settings for i in instances]
    tile_p = sorted({c["tile_p"] for c in configs if "tile_p" in c})
    tile_n = sorted({c["tile_n"] for c in configs if "tile_n" in c})
    walked = max((c.get("tiles", 1) for c in configs), default=1)  # pixel tiles a block walks
    pixels, passes = _products(tile_p, walked), _products(tile_n, PASSES_SEEN)
    stages: dict[tuple[int, int], int] = {}
    for c in configs:
        if "kc" in c:
            pair = (c["kc"], c.get("c_split", 1))
            stages[pair] = max(stages.get(pair, 0), c["stages"])
    chunks = _chunk_classes(sorted((*pair, most) for pair, most in stages.items()))

    def chunk_class(p: Any) -> int:
        return chunks[min(-(-p.MC // 32), CHUNKS_SEEN)]

    if isinstance(family, dw.DwsepWgmmaResident):  # and the SHARED with it, each its own
        limits = _mc_limits(instances, lambda i, p: get_family(i.family).shared_bytes(
            i.settings, p) <= dw.SMEM_OPT_IN)

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (p.R == p.S == 3, bisect_left(passes, p.K),
                    bisect_left(limits, p.MC)) if copies else None
    elif isinstance(family, dw.DwsepWgmmaSplit):
        waves = sorted({(c["tile_p"], c["tile_n"]) for c in configs})
        most_p, most_n = max(tile_p), max(tile_n)

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            if not copies:
                return None
            # whether each tile's unsplit grid makes two waves already (all do where the
            # largest tiles' does)
            two = (-(-npq // most_p) * -(-p.K // most_n) >= 2 * SM_COUNT or
                   tuple(-(-npq // t) * -(-p.K // n) >= 2 * SM_COUNT for t, n in waves))
            return p.R == p.S == 3, min(-(-p.MC // 64), 9), two
    elif isinstance(family, dw.DwsepWgmma):
        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return p.R == p.S == 3 if copies else None
    elif isinstance(family, dw.DwsepHalo):  # and _halo_tc
        tc = isinstance(family, dw.DwsepHaloTc)
        halos = sorted({(c["tile_h"], c["tile_w"]) for c in configs})
        most_h, most_w = max(h for h, _ in halos), max(w for _, w in halos)
        # the tile sides above 8, against twice the map's (DwsepHalo.refuses)
        tall = sorted({h for h, _ in halos if h > 8})
        wide = sorted({w for _, w in halos if w > 8})

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            if not copies or tc and (p.R, p.S, p.stride) != (5, 5, 1):
                return None
            # spatial tiles of each tile shape, up to the most a block walks (all past it
            # where the largest tile's are; blocks of one tile do not count them)
            few = (walked > 1 and p.N * -(-p.P // most_h) * -(-p.Q // most_w) <= walked and
                   tuple(min(p.N * -(-p.P // h) * -(-p.Q // w), walked + 1)
                         for h, w in halos))
            return (p.R, p.S, p.stride, _at_least(tall, 2 * p.P), _at_least(wide, 2 * p.Q),
                    chunk_class(p), few)
    elif isinstance(family, dw.DwsepStream):
        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (copies, family.filter_case(p), copies and p.R * p.S,
                    walked > 1 and bisect_left(pixels, npq), chunk_class(p))
    elif isinstance(family, dw.DwsepResident):
        limits = _mc_limits(instances, lambda i, p: dw.DwsepTensorCore.refuses(family, i, p)
                            is None)

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return bisect_left(passes, p.K), bisect_left(limits, p.MC)
    else:  # dwsep_chunked: the grid's limits only
        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return None

    return key


def _walking(family: Any, instances: Sequence[Instance], operator: str
             ) -> list[tuple[list[Instance], RuleKey]]:
    """dwsep_halo's and dwsep_stream's keys, one for the instances that walk several tiles and
    one for the others (which do not compare the tiles, and alone split the chunks): two small
    keys rather than one of every combination."""
    parts: dict[bool, list[Instance]] = {}
    for i in instances:
        parts.setdefault(i.settings.get("tiles", 1) > 1, []).append(i)
    return [(members, _dwsep_key(family, members, operator)) for members in parts.values()]


# family name -> its key's maker (family, the catalogue's instances of it, operator): a key, or
# keys of parts of the instances
KEYS: dict[str, Callable[[Any, Sequence[Instance], str], RuleKey]] = {
    "conv_igemm": _gemm_key, "conv_wgmma": _gemm_key, "conv_wgmma_split": _wgmma_split_key,
    "conv_direct": _direct_key, "conv_grouped_mma": _grouped_mma_key,
    "conv_grouped_mma_bwd_weight": _grouped_mma_key, "conv_dw_tma": _dw_tma_key,
    "conv_dw_tma_bwd_weight": _dw_tma_key, "gn_onepass": _groupnorm_key,
    "gn_twopass": _groupnorm_key,
    **{name: _dwsep_key for name in (
        "dwsep_chunked", "dwsep_resident", "dwsep_wgmma", "dwsep_wgmma_split",
        "dwsep_wgmma_resident", "dwsep_wgmma_bulk", "dwsep_wgmma_cluster")},
    **{name: _walking for name in ("dwsep_stream", "dwsep_halo", "dwsep_halo_tc")},
}


# families keyed together with another's: one key, computed once a shape, for the instances of
# both, where the other's key reads all that theirs would (a few more masks, fewer keys a call)
SHARED = {"dwsep_wgmma": "dwsep_wgmma_resident", "dwsep_wgmma_bulk": "dwsep_wgmma_resident",
          "dwsep_wgmma_cluster": "dwsep_wgmma_resident", "dwsep_chunked": "dwsep_stream"}


def rule_keys(family: KernelFamily, instances: Sequence[Instance], operator: str
              ) -> list[tuple[list[Instance], RuleKey]] | None:
    """The family's rule keys over `instances` (its own, of `operator`, and those of the
    families SHARED with it): each for some of them; None where it has none. A family without
    rules of its own has one key for every shape."""
    if type(family).applicable is KernelFamily.applicable:
        return [(list(instances), lambda p: None)]
    maker = KEYS.get(family.name)
    if maker is None:
        return None
    made = maker(family, instances, operator)
    return [(list(instances), made)] if callable(made) else made


@dataclass(frozen=True)
class RuleMask:
    """The candidates a shape allows: one byte each (catalogue order), where `address`
    points."""

    mask: np.ndarray
    exact: bool  # the rules' answer for every candidate; else some are left to the rules
    address: ctypes.c_void_p


class RuleMasks:
    """The mask of a catalogue's instances for a shape (the same `operator` and dtype): exact
    for the families with a rule key, each family's rules evaluated once per key; the others'
    instances kept where their compiled case allows (a necessary condition: `unsure`)."""

    def __init__(self, instances: Sequence[Instance], operator: str) -> None:
        self.count = len(instances)
        self.rules = [get_family(i.family) for i in instances]
        rows: dict[str, list[int]] = {}
        for r, i in enumerate(instances):
            rows.setdefault(SHARED.get(i.family, i.family), []).append(r)
        self.instances = list(instances)
        self.keyed: list[tuple[RuleKey, np.ndarray, dict]] = []
        self.cased: list[tuple[Any, np.ndarray]] = []
        self.unsure = np.zeros(self.count, bool)
        for name, members in rows.items():
            family, index = get_family(name), np.array(members)
            keys = rule_keys(family, [instances[r] for r in members], operator)
            if keys is not None:
                where = {id(instances[r]): r for r in members}
                self.keyed += [(key, np.array([where[id(i)] for i in part]), {})
                               for part, key in keys]
                continue
            self.unsure[index] = True
            for member in {instances[r].family for r in members}:
                own = get_family(member)
                if type(own).compiled_case is not KernelFamily.compiled_case:
                    self.cased.append((own, np.array([r for r in members
                                                      if instances[r].family == member])))
        self.keys = [key for key, _, _ in self.keyed]
        self.masks: dict[tuple, RuleMask] = {}

    def __call__(self, problem: Any) -> RuleMask:
        key = tuple([k(problem) for k in self.keys])
        if self.cased:
            key += tuple(tuple(f.compiled_case(problem).items()) for f, _ in self.cased)
        found = self.masks.get(key)
        if found is None:
            found = self.masks[key] = self._mask(problem, key)
            if len(self.masks) > CACHE_LIMIT:
                self.masks.clear()
                self.masks[key] = found
        return found

    def _mask(self, problem: Any, key: tuple) -> RuleMask:
        mask = np.ones(self.count, np.uint8)
        for (_, rows, seen), part in zip(self.keyed, key):
            allowed = seen.get(part)
            if allowed is None:
                allowed = np.array([self.rules[r].applicable(self.instances[r], problem) is None
                                    for r in rows], np.uint8)
                if len(seen) >= CACHE_LIMIT:
                    seen.clear()
                seen[part] = allowed
            mask[rows] = allowed
        for family, rows in self.cased:
            case = family.compiled_case(problem)
            for r in rows:
                settings = self.instances[r].settings
                if any(settings.get(field) != value for field, value in case.items()):
                    mask[r] = 0
        return RuleMask(mask, not (mask.astype(bool) & self.unsure).any(),
                        ctypes.c_void_p(mask.ctypes.data))
