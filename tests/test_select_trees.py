"""Trees as leaf masks (farm/select/trees.py) and the C export's lowest-bit table, on a small
hand-written tree."""

import math

from farm.select.cexport import _DEBRUIJN, _debruijn
from farm.select.trees import Tree, leaf_masks

# x0 <= 1 (NaN left) ? (x1 <= 5 ? A : B) : (x0 <= 3 (NaN right, as missing type NaN) ? C : D)
TREE = Tree(feature=(0, 1, 0), threshold=(1.0, 5.0, 3.0), decision=(2, 0, 8),
            left=(1, -1, -3), right=(2, -2, -4), leaves=(10.0, 20.0, 30.0, 40.0))


def walk(t: Tree, row) -> float:
    n = 0
    while n >= 0:
        v, missing = row[t.feature[n]], (t.decision[n] >> 2) & 3
        nan_left = bool(t.decision[n] & 2) if missing == 2 else 0.0 <= t.threshold[n]
        left = (not v > t.threshold[n]) if nan_left else v <= t.threshold[n]
        n = t.left[n] if left else t.right[n]
    return t.leaves[~n]


def test_leaf_masks_number_leaves_left_to_right_and_exit_where_the_tree_does():
    masks = leaf_masks(TREE)
    assert masks.leaves == (10.0, 20.0, 30.0, 40.0) and masks.full == 0b1111
    assert [s.drop for s in masks.splits] == [0b0001, 0b0011, 0b0100]
    values = (-1.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, math.nan)
    for a in values:
        for b in values:
            assert masks.leaf((a, b)) == walk(TREE, (a, b)), (a, b)


def test_a_tree_over_a_mask_is_left_to_branches_and_a_stump_is_one_leaf():
    stump = Tree((), (), (), (), (), (1.5,))
    assert leaf_masks(stump).leaf(()) == 1.5
    n = 65  # a chain of splits with 66 leaves
    chain = Tree(tuple([0] * n), tuple(float(i) for i in range(n)), tuple([0] * n),
                 tuple(~i for i in range(n)), tuple(i + 1 for i in range(n - 1)) + (~n,),
                 tuple(float(i) for i in range(n + 1)))
    assert leaf_masks(chain) is None


def test_lowest_bit_table_finds_every_bit():
    table = _debruijn()
    for i in range(64):
        m = (1 << i) | ((0xA5A5A5A5A5A5A5A5 << (i + 1)) & (2**64 - 1))
        assert table[((m & -m) * _DEBRUIJN & (2**64 - 1)) >> 58] == i
