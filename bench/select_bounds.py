"""What exact pruning by bounds could save in the C export: the share of (candidate, tree)
leaf sums that a call would still compute if, after each block of GROUP trees, it dropped
every candidate whose lowest possible final cost is above the highest possible cost of the
best (and of the guard's head), as the export's prune() does.

For each operator (--ops) of the recordings: one model (the default split and training
settings), and over --shapes query shapes (the held-out problems, then generated ones) each
candidate's exit leaf in every tree. A candidate's bounds for the trees still to come are the
sums of the lowest and highest leaf it can reach in each of them: `fixed`, the leaves the
splits on its instance columns and the device leave it (what prune() knows), or `shape`, those
the shape's splits leave too (the most that bounds without the interactions can know). Trees in
the model's order or by their leaf spread (largest first). Two questions: `best` over the
rules' mask (the C export), and the best few over every candidate (what the Python Selector
asks, which has no applicability mask). Checks that the true choice survives every pruning.
Also reports, per setting, the median width of a candidate's bounds after the first block
against the median gap between the best and the second-best full cost. Writes
bench/results/select_bounds.json (--name, --out).

Usage: python -m bench.select_bounds --recording jobs/recordings/h100-dwsep.parquet
           --ops dwsep_fwd --no-resources
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import recording_parser, write_cpu_result
from bench.select_eval import query_shapes, recorded_datasets
from farm.problems import Problem
from farm.select.catalogue import compile_cache_resources, no_resources
from farm.select.cexport import GROUP, _Columns
from farm.select.export import MODEL, bundle_files
from farm.select.features import feature_matrix
from farm.select.guard import reference_flags
from farm.select.selector import Selector
from farm.select.train import TrainConfig, train
from farm.select.trees import LeafMasks, Split, leaf_masks, parse_trees

ORDERS = ("model", "spread")
BOUNDS = ("fixed", "shape")
MARGIN = 1e-9  # relative room for the rounding of sums taken in other orders


@dataclass(frozen=True)
class LeafTables:
    """Per shape, candidate and tree (costs: raw scores negated where the model's cost is):
    the exit leaf's cost, and the lowest and highest cost of the leaves the candidate can
    reach, by the splits on known values alone (`fixed`, no shape axis) or with the shape's."""

    cost: np.ndarray  # (shapes, candidates, trees)
    fixed_low: np.ndarray  # (candidates, trees)
    fixed_high: np.ndarray
    shape_low: np.ndarray  # (shapes, candidates, trees)
    shape_high: np.ndarray
    spread: np.ndarray  # (trees,): each tree's highest leaf less its lowest

    def bounds(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) per shape, candidate and tree of the bounds `kind` (BOUNDS)."""
        if kind == "fixed":
            return (np.broadcast_to(self.fixed_low, self.cost.shape),
                    np.broadcast_to(self.fixed_high, self.cost.shape))
        return self.shape_low, self.shape_high


def _kept(masks: np.ndarray, leaves: int) -> np.ndarray:
    """Whether each of `masks` keeps each leaf (masks x leaves)."""
    bits = (masks[:, None] >> np.arange(leaves, dtype=np.uint64)) & np.uint64(1)
    return bits.astype(bool)


def _reach(masks: np.ndarray, leaves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest of `leaves` whose bits each of `masks` keeps."""
    kept = _kept(masks, len(leaves))
    return (np.where(kept, leaves, np.inf).min(axis=1),
            np.where(kept, leaves, -np.inf).max(axis=1))


def _cleared(masks: np.ndarray, split: Split, values: np.ndarray) -> np.ndarray:
    """`masks` with the split's left leaves cleared where its test fails on `values`."""
    passes = ~(values > split.threshold) if split.nan_left else values <= split.threshold
    return np.where(passes, masks, masks & np.uint64(~split.drop & (2**64 - 1)))


def _tree_columns(tree: LeafMasks, x: np.ndarray, cols: _Columns, count: int, sign: float
                  ) -> tuple[np.ndarray, ...]:
    """One tree over the rows `x` (shape-major, `count` candidates a shape): the exit leaf's
    cost, the shape's bounds, then the fixed bounds (from the first shape's rows: the known
    values are the same for every shape)."""
    leaves = np.array(tree.leaves) * sign
    full = known = np.full(len(x), tree.full, dtype=np.uint64)
    fixed = np.full(count, tree.full, dtype=np.uint64)
    for split in tree.splits:
        full = _cleared(full, split, x[:, split.feature])
        if split.feature < cols.interactions:
            known = _cleared(known, split, x[:, split.feature])
        if cols.known(split.feature):
            fixed = _cleared(fixed, split, x[:count, split.feature])
    exit_leaf = leaves[_kept(full, len(leaves)).argmax(axis=1)]  # the lowest bit
    return (exit_leaf, *_reach(known, leaves), *_reach(fixed, leaves))


def leaf_tables(selector: Selector, model_text: str, shapes: Sequence[Problem]) -> LeafTables:
    """The LeafTables of a model (its Selector and text) over `shapes`."""
    s = selector
    trees = [leaf_masks(t) for t in parse_trees(model_text)]
    if any(t is None for t in trees):
        raise ValueError("a tree has more leaves than a mask holds")
    sign = 1.0 if s.kind == "regressor" else -1.0
    count = len(s.catalogue)
    values = np.array([p.number_values() for p in shapes], np.float64)
    x = feature_matrix(s.spec, {f: np.repeat(values[:, i], count)
                                for i, f in enumerate(s.spec.inputs)},
                       np.tile(s._table, (len(shapes), 1)))
    cols = _Columns(s.spec, s._table)
    columns = [_tree_columns(t, x, cols, count, sign) for t in trees]
    cube = lambda i: np.stack([c[i] for c in columns], axis=1).reshape(  # noqa: E731
        len(shapes), count, len(trees))
    return LeafTables(cube(0), np.stack([c[3] for c in columns], axis=1),
                      np.stack([c[4] for c in columns], axis=1), cube(1), cube(2),
                      np.array([(max(t.leaves) - min(t.leaves)) for t in trees]))


def tree_order(tables: LeafTables, order: str) -> np.ndarray:
    """The trees in the model's order, or by leaf spread, largest first (ORDERS)."""
    trees = np.arange(tables.cost.shape[2])
    return trees if order == "model" else np.argsort(-tables.spread, kind="stable")


def _limit(high: np.ndarray, plain: np.ndarray, k: int, depth: int) -> float:
    """The highest cost a kept candidate may need: the k-th lowest highest possible cost, or
    the guard's head's (the depth-th lowest among the plain families') where that is higher."""
    limit = np.sort(high)[min(k, len(high)) - 1]
    if depth > 1 and plain.sum() >= depth:
        limit = max(limit, np.sort(high[plain])[depth - 1])
    return float(limit)


def pruned_sums(tables: LeafTables, shape: int, live: np.ndarray, plain: np.ndarray,
                order: np.ndarray, bounds: tuple[np.ndarray, np.ndarray], k: int, depth: int
                ) -> tuple[int, np.ndarray]:
    """(leaf sums computed, candidates left) for one shape when candidates `live` (indices;
    `plain`: not of a reference family) are summed block by block in `order`, dropping after
    each block those whose lowest possible cost exceeds _limit."""
    cost = tables.cost[shape]
    low, high = bounds[0][shape], bounds[1][shape]
    part = np.zeros(len(cost))
    done = 0
    for start in range(0, len(order), GROUP):
        block, rest = order[start:start + GROUP], order[start + GROUP:]
        part[live] += cost[np.ix_(live, block)].sum(axis=1)
        done += len(live) * len(block)
        if len(rest) and len(live) > k:
            lowest = part[live] + low[np.ix_(live, rest)].sum(axis=1)
            highest = part[live] + high[np.ix_(live, rest)].sum(axis=1)
            limit = _limit(highest, plain[live], k, depth)
            live = live[lowest <= limit + MARGIN * (1.0 + abs(limit))]
    return done, live


def pruned_share(tables: LeafTables, allowed: np.ndarray, reference: np.ndarray, order: str,
                 bounds: str, k: int, depth: int) -> float:
    """The share of the allowed candidates' leaf sums that pruning still computes over every
    shape (allowed: shapes x candidates); asserts that the k best survive."""
    done = total = 0
    trees = tree_order(tables, order)
    pair = tables.bounds(bounds)
    for shape, mask in enumerate(allowed):
        live = np.flatnonzero(mask)
        if not len(live):
            continue
        summed, kept = pruned_sums(tables, shape, live, ~reference, trees, pair, k, depth)
        best = live[np.argsort(tables.cost[shape, live].sum(axis=1), kind="stable")[:k]]
        assert set(best) <= set(kept), (shape, best, kept)
        done, total = done + summed, total + len(live) * len(trees)
    return done / total


def widths(tables: LeafTables, allowed: np.ndarray, bounds: str) -> dict[str, float]:
    """Medians over the shapes' allowed candidates: the width of a candidate's bounds after
    the first block (model order), and the gap between the best and second-best full cost."""
    low, high = tables.bounds(bounds)
    rest = slice(GROUP, None)
    width = (high[:, :, rest].sum(axis=2) - low[:, :, rest].sum(axis=2))[allowed]
    full = np.where(allowed, tables.cost.sum(axis=2), np.inf)
    ranked = np.sort(full, axis=1)
    two = allowed.sum(axis=1) >= 2
    return {"width_after_first_block": float(np.median(width)),
            "best_to_second": float(np.median(ranked[two, 1] - ranked[two, 0]))}


def operator_figures(selector: Selector, model_text: str, shapes: Sequence[Problem]) -> dict:
    """Each question, order and bounds: the share of leaf sums computed, and the widths."""
    tables = leaf_tables(selector, model_text, shapes)
    reference = reference_flags([e.family for e in selector.catalogue])
    depth = selector.guard_depth if selector.guard_depth > 1 else 0
    questions = {"best_rules_mask": np.array([selector.allowed(p) for p in shapes], bool),
                 "every_candidate_top_3": np.ones((len(shapes), len(selector.catalogue)), bool)}
    ks = {"best_rules_mask": 1, "every_candidate_top_3": 3}
    out: dict = {"shapes": len(shapes), "candidates": len(selector.catalogue),
                 "trees": int(tables.cost.shape[2]), "group": GROUP}
    for question, allowed in questions.items():
        out[question] = {
            "allowed_median": float(np.median(allowed.sum(axis=1))),
            "share_summed": {f"{order}, {bounds}": round(pruned_share(
                tables, allowed, reference, order, bounds, ks[question], depth), 4)
                for order in ORDERS for bounds in BOUNDS},
            **{f"{bounds} bounds": widths(tables, allowed, bounds) for bounds in BOUNDS}}
    return out


def main() -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--shapes", type=int, default=300)
    parser.add_argument("--no-resources", action="store_true",
                        help="no registers or shared memory from the compile cache")
    parser.add_argument("--name", default="select_bounds")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    figures: dict = {"operators": {}}
    resources = no_resources if args.no_resources else compile_cache_resources(args.arch)
    with tempfile.TemporaryDirectory() as scratch:
        for data in recorded_datasets(args.recording, args.ops, args.arch, args.dtype,
                                      resources, Path(scratch)):
            files = bundle_files(train(data, TrainConfig()))
            selector = Selector(files, "lightgbm")
            entry = operator_figures(selector, files[MODEL], query_shapes(data, args.shapes))
            figures["operators"][data.operator] = entry
            print(data.operator, entry, flush=True)
    write_cpu_result(args.name, "no timing: leaf sums counted", figures, args.out)


if __name__ == "__main__":
    main()
