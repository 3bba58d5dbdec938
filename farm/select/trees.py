"""The trees of a LightGBM text model, and each tree as leaf masks (QuickScorer), which the C
export evaluates without data-dependent branches: number a tree's leaves left to right, one bit
each; a split whose test fails (the value goes right) clears the bits of its left subtree's
leaves; the exit leaf is the lowest bit left once every split's test is applied, reached or
not. The AND of the masks is order-free, so splits on values known in advance (device
constants, instance columns) fold into one mask per candidate when the export is generated,
splits on the shape once per call, and only the splits on interactions are tested candidate by
candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MAX_LEAVES = 64  # one uint64_t per tree and candidate


@dataclass(frozen=True)
class Tree:
    """One LightGBM tree: node tables (children < 0 are leaves ~child) and leaf values."""

    feature: tuple[int, ...]
    threshold: tuple[float, ...]
    decision: tuple[int, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]
    leaves: tuple[float, ...]


def parse_trees(model_text: str) -> list[Tree]:
    """The trees of a LightGBM text model (numerical splits only)."""
    trees, block = [], None
    for line in model_text.splitlines() + ["end of trees"]:
        if line.startswith("Tree=") or line.startswith("end of trees"):
            if block is not None:
                trees.append(_tree(block))
            block = {} if line.startswith("Tree=") else None
            if block is None and line.startswith("end of trees"):
                break
        elif block is not None and "=" in line:
            key, _, value = line.partition("=")
            block[key] = value.split()
    return trees


def _tree(b: dict[str, list[str]]) -> Tree:
    if int(b.get("num_cat", ["0"])[0]):
        raise ValueError("categorical splits are not exported (no feature is categorical)")
    ints = lambda k: tuple(int(v) for v in b.get(k, []))  # noqa: E731
    return Tree(ints("split_feature"), tuple(float(v) for v in b.get("threshold", [])),
                ints("decision_type"), ints("left_child"), ints("right_child"),
                tuple(float(v) for v in b["leaf_value"]))


@dataclass(frozen=True)
class Split:
    """One numerical split: where its test fails, the bits of `drop` are cleared."""

    feature: int
    threshold: float
    nan_left: bool  # NaN passes the test (LightGBM's missing-value rule folded in)
    drop: int

    def passes(self, value: float) -> bool:
        """The test as the C export writes it: !(v > t) where NaN goes left, else v <= t."""
        return not value > self.threshold if self.nan_left else value <= self.threshold


@dataclass(frozen=True)
class LeafMasks:
    """A tree's leaf values left to right and its splits as masks."""

    leaves: tuple[float, ...]
    splits: tuple[Split, ...]

    @property
    def full(self) -> int:
        return (1 << len(self.leaves)) - 1

    def mask(self, splits: Sequence[Split], value) -> int:
        """The AND of `splits` (a subset of this tree's) under value(split)."""
        out = self.full
        for s in splits:
            if not s.passes(value(s)):
                out &= ~s.drop
        return out

    def leaf(self, row: Sequence[float]) -> float:
        """The exit leaf's value for a full feature row (the reference the C code follows)."""
        m = self.mask(self.splits, lambda s: row[s.feature])
        return self.leaves[(m & -m).bit_length() - 1]


def nan_left(t: Tree, n: int) -> bool:
    """Whether NaN takes node n's left branch: its default direction where NaN is the missing
    type, else the side of 0 (NaN is then read as zero)."""
    missing = (t.decision[n] >> 2) & 3
    if missing == 1:
        raise ValueError("zero-as-missing splits are not exported (zero_as_missing is off)")
    return bool(t.decision[n] & 2) if missing == 2 else 0.0 <= t.threshold[n]


def leaf_masks(t: Tree) -> LeafMasks | None:
    """The tree as leaf masks; None when it has more leaves than a mask holds."""
    if not t.feature:
        return LeafMasks(t.leaves[:1], ())
    if len(t.leaves) > MAX_LEAVES:
        return None
    order: list[int] = []
    splits: list[Split] = []

    def walk(n: int) -> int:
        """Visit n's subtree left to right; the bits of its leaves."""
        if n < 0:
            order.append(~n)
            return 1 << (len(order) - 1)
        left = walk(t.left[n])
        splits.append(Split(t.feature[n], t.threshold[n], nan_left(t, n), left))
        return left | walk(t.right[n])

    walk(0)
    return LeafMasks(tuple(t.leaves[i] for i in order), tuple(splits))
