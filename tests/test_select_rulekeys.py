"""The families' rules asked in bulk (farm.select.rulekeys, the keys in each operator
package's rulekeys): every operator's families have a rule key, and the masks kept per key are
the rules' answer on random shapes and the networks' (a rule that comes to read more of a shape
than its family's key fails here); the Selector chooses as checking the rules one at a time,
with every family keyed or with one left to the rules."""

import numpy as np
import pytest

from farm.select.catalogue import candidate_families
from farm.select.rulekeys import RuleMasks
from farm.select.synthetic import network_shapes
from kernels.conv import rulekeys as conv_keys
from kernels.dwsep import rulekeys as dwsep_keys
from kernels.registry import get_family, operator_spec

DTYPE = "bf16"
OPERATORS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight", "dwsep_fwd", "groupnorm_bwd")


def shapes_of(op, count, seed):
    spec = operator_spec(op)
    shapes = spec.synthetic_shapes(count, seed=seed) + network_shapes(op)
    return [spec.problem(DTYPE, s) for s in shapes]


@pytest.mark.parametrize("op", OPERATORS)
def test_the_masks_kept_per_rule_key_are_the_rules_answer(op):
    instances = [i for f in candidate_families(op) for i in f.instances(op, DTYPE)]
    masks = RuleMasks(instances, op)
    assert not masks.unsure.any(), "every family of the operator has a rule key"
    rules = [get_family(i.family).applicable for i in instances]
    shapes = shapes_of(op, 700, seed=41)
    for p in shapes:
        allowed = masks(p)
        truth = np.array([rule(i, p) is None for rule, i in zip(rules, instances)])
        assert allowed.exact
        wrong = sorted({instances[i].name for i in np.flatnonzero(allowed.mask != truth)})
        assert not wrong, f"{p.label()}: {wrong[:5]}"
    # the keys are coarse: each family's rules ran on far fewer shapes than were asked
    assert all(len(seen) < 0.6 * len(shapes) for _, _, seen in masks.keyed)


def test_a_key_that_misses_what_a_rule_reads_is_caught():
    """The check above fails a key that leaves out what the rules read: conv_dw_tma's without
    the filter gives 3x3 shapes the 5x5 instances."""
    op = "conv2d_fwd"
    family = get_family("conv_dw_tma")
    instances = family.instances(op, DTYPE)
    right = RuleMasks(instances, op)
    wrong = RuleMasks(instances, op)
    key = wrong.keyed[0][0]
    wrong.keys[0] = lambda p: None if key(p) is None else key(p)[1:]
    shapes = [operator_spec(op).problem(DTYPE, dict(N=1, C=64, K=64, G=64, H=28, W=28, R=r,
                                                    S=r, pad_h=r // 2, pad_w=r // 2))
              for r in (3, 5)]
    assert [right(p).mask.tolist() for p in shapes] != [wrong(p).mask.tolist() for p in shapes]
    assert (wrong(shapes[1]).mask == wrong(shapes[0]).mask).all()


def test_one_slices_answers_as_one_slice_of_each_class():
    """The im2col key's one_slices (each split's k-tiles worked out once) answers as
    wgmma_im2col.one_slice does for each class, on every kind of grid."""
    import random

    from kernels.conv.igemm import block_tiles
    from kernels.conv.wgmma_im2col import one_slice

    draw = random.Random(7)
    classes = [(bm, bn, r) for bm in (64, 128, 192) for bn in (64, 128, 256) for r in (132, 264)]
    answers = set()
    for _ in range(3000):
        z, rows, n = draw.choice([1, 2, 9, 64, 4096]), draw.randint(1, 30000), draw.randint(8, 900)
        k_tiles, most = draw.randint(1, 400), 65535 // z
        expected = tuple(one_slice(z * block_tiles(rows, n, bm, bn), r, k_tiles, most)
                         for bm, bn, r in classes)
        assert conv_keys.one_slices(classes, z, rows, n, k_tiles, most) == expected
        answers.update(expected)
    assert answers == {True, False}


def test_the_dwsep_counts_stop_where_the_rules_stop_comparing():
    """Chunk counts past CHUNKS_SEEN look alike to every split (none empty, steps past the
    stages), and the M*C limits are where shared memory stops fitting."""
    splits = [(32, 1, 4), (32, 8, 2), (64, 2, 2), (64, 4, 2), (64, 8, 2)]
    n = dwsep_keys.CHUNKS_SEEN
    assert {dwsep_keys._chunk_sees(q, splits) for q in range(n, 5000)} == {
        dwsep_keys._chunk_sees(n, splits)}
    assert dwsep_keys._chunk_sees(n - 1, splits) != dwsep_keys._chunk_sees(n, splits)  # no sooner
    classes = dwsep_keys._chunk_classes(splits)
    assert len(classes) == n + 1 and len(set(classes)) < n / 3
    assert dwsep_keys._largest(lambda x: x <= 1234) == 1234
    assert dwsep_keys._largest(lambda x: False) == -1
    assert dwsep_keys._products([16, 64], 2) == [16, 32, 64, 128]


def test_the_selector_chooses_as_the_rules_one_at_a_time(monkeypatch, tmp_path):
    """Ranked in C over an exact mask, or with a family left to the rules (checked lazily),
    the Selector answers as the rules asked one candidate at a time do."""
    from tests.test_select import problems, trained

    monkeypatch.setenv("FARM_SELECT_CACHE", str(tmp_path / "cache"))
    env = trained(tmp_path, "conv2d_fwd", 80, 40)
    fast, shapes = env.selector, problems("conv2d_fwd", 150, seed=31)
    reference = env.slow  # LightGBM's costs, the masks only where known
    reference._masks.keyed.clear()  # every candidate checked by its rules
    reference._masks.keys.clear()
    reference._masks.unsure[:] = True
    assert fast._rank_c is not None
    expected = [reference.select(p) for p in shapes]
    assert [fast.select(p) for p in shapes] == expected
    assert [fast.top(p, 3) for p in shapes[:40]] == [reference.top(p, 3) for p in shapes[:40]]
    monkeypatch.delitem(conv_keys.KEYS, "conv_igemm")
    mixed = type(fast)(env.files, "c")
    assert mixed._masks.unsure.any() and not all(mixed._masks(p).exact for p in shapes)
    assert [mixed.select(p) for p in shapes] == expected
