"""The dwsep families' rule keys (farm/select/rulekeys.py): the copies, the filter case,
pixel, spatial and channel tiles and chunks counted up to where the rules stop comparing them,
and the M*C whose resident tiles fit shared memory."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from farm.select.rulekeys import RuleKey, at_least
from kernels.family import SM_COUNT, Instance
from kernels.registry import get_family


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


def _staged_rooms(rooms: Any) -> list[tuple[int, list[int]]]:
    """(tile_p, the most staged input pixels an instance holds) pairs, per tile_p sorted."""
    per_tile: dict[int, list[int]] = {}
    for tile, room in rooms:
        per_tile.setdefault(tile, []).append(room)
    return sorted((t, sorted(v)) for t, v in per_tile.items())


def _staged_fit(rooms: list[tuple[int, list[int]]], p: Any) -> tuple:
    """Per tile_p of `rooms`, how many instances' rooms lie below the shape's staged input
    pixels (rows x W): which instances the buffers fit."""
    from kernels.dwsep.families import StagedInput

    return tuple(bisect_left(most, StagedInput.staged_rows({"tile_p": t}, p) * p.W)
                 for t, most in rooms)


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

    if isinstance(family, dw.DwsepWgmmaBulkStaged):
        # its shared memory reads M*C and the staged rows: whether each configuration's fits
        kinds = list({(c["tile_p"], c["tile_n"], c["stages"], c["filter"]): c
                      for c in configs}.values())

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (family.filter_case(p), bisect_left(passes, p.K), tuple(
                family.shared_bytes(c, p) <= dw.SMEM_OPT_IN for c in kinds)) if copies else None
    elif isinstance(family, dw.DwsepWgmmaResident):  # and the SHARED with it, each its own
        limits = _mc_limits(instances, lambda i, p: get_family(i.family).shared_bytes(
            i.settings, p) <= dw.SMEM_OPT_IN)
        # dwsep_wgmma_cluster's staged instances
        rooms = _staged_rooms((i.settings["tile_p"], get_family(i.family).input_room(i.settings))
                              for i in instances if i.settings.get("staged"))

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (p.R == p.S == 3, bisect_left(passes, p.K), bisect_left(limits, p.MC),
                    _staged_fit(rooms, p)) if copies else None
    elif isinstance(family, dw.DwsepWgmmaSplit):  # and dwsep_wgmma_split_staged
        waves = sorted({(c["tile_p"], c["tile_n"]) for c in configs})
        most_p, most_n = max(tile_p), max(tile_n)
        rooms = _staged_rooms((c["tile_p"], family.pixels_room(c)) for c in configs
                              if isinstance(family, dw.DwsepWgmmaSplitStaged))

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
            return family.filter_case(p), min(-(-p.MC // 64), 9), two, _staged_fit(rooms, p)
    elif isinstance(family, dw.DwsepWgmmaRing):
        # channel tiles against the cluster's blocks, chunks of 64 too, and the buffers' fit
        clusters = _products(tile_n, max(c["k_share"] for c in configs))
        rooms = _staged_rooms((c["tile_p"], family.pixels_room(c)) for c in configs)

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (family.filter_case(p), bisect_left(clusters, p.K), min(-(-p.MC // 64), 9),
                    _staged_fit(rooms, p)) if copies else None
    elif isinstance(family, dw.DwsepWgmmaStaged):
        rooms = _staged_rooms((c["tile_p"], family.pixels_room(c)) for c in configs)

        def key(p: Any) -> Hashable:
            copies, npq, huge = _dwsep_values(p)
            if huge:
                return p
            return (family.filter_case(p), _staged_fit(rooms, p)) if copies else None
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
            return (p.R, p.S, p.stride, at_least(tall, 2 * p.P), at_least(wide, 2 * p.Q),
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


# family name -> its key's maker: a key, or keys of parts of the instances
KEYS: dict[str, Callable[[Any, Sequence[Instance], str], Any]] = {
    **{name: _dwsep_key for name in (
        "dwsep_chunked", "dwsep_resident", "dwsep_wgmma", "dwsep_wgmma_split",
        "dwsep_wgmma_split_staged", "dwsep_wgmma_staged",
        "dwsep_wgmma_resident", "dwsep_wgmma_bulk", "dwsep_wgmma_bulk_staged",
        "dwsep_wgmma_cluster", "dwsep_wgmma_ring")},
    **{name: _walking for name in ("dwsep_stream", "dwsep_halo", "dwsep_halo_tc")},
}

# families keyed together with another's: one key, computed once a shape, for the instances of
# both, where the other's key reads all that theirs would (a few more masks, fewer keys a call)
SHARED = {"dwsep_wgmma": "dwsep_wgmma_resident", "dwsep_wgmma_bulk": "dwsep_wgmma_resident",
          "dwsep_wgmma_cluster": "dwsep_wgmma_resident", "dwsep_chunked": "dwsep_stream"}
